"""Ctrl-C: the first press stops the command cleanly, the second at once.

The first press raises KeyboardInterrupt where the main thread is (a training step, an event
loop waiting on episodes, a checkpoint being written): the run stops with what it saved
intact and prints how to continue, exit code 130. An SFT warm start asks the loop to finish
its step and save first (:func:`turnrl.train.sft.finish_step_on_ctrl_c`). Clean-up (closing
envs and workers) can take seconds; a second press does not wait for it: it prints the resume
command (:func:`resume_hint`) and ends the process at once, exit code 130.

Why a handler of our own rather than Python's: ``asyncio.run`` replaces Python's default
handler with one whose first press only cancels the running task, so a loop that no task
returns to (a blocking call inside ``async def``) ignores it. With this one installed,
``asyncio.run`` leaves the handler alone.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_hint: list[str] = []


def resume_hint(text: str) -> None:
    """What a second Ctrl-C prints before it ends the process (how to continue the run)."""
    _hint[:] = [text]


@contextmanager
def ctrl_c_stops() -> Iterator[None]:
    """Within it, Ctrl-C acts as the module docstring says (in the main thread; elsewhere no
    handler can be set, and Python's applies)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = [0]

    def handler(signum: int, frame: object) -> None:
        presses[0] += 1
        if presses[0] == 1:
            raise KeyboardInterrupt
        hint = f"; {_hint[0]}" if _hint else ""
        try:  # os.write, not print: a handler may run in the middle of a print
            os.write(2, f"\ninterrupted again: stopped at once{hint}\n".encode())
        finally:
            os._exit(130)

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)
        _hint.clear()
