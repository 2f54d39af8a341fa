"""Env code off the caller's event loop: no env can freeze the loop that runs the episodes.

:class:`GuardedEnv` runs every call into an env (``reset``, ``step``, ``answer``, ``grade``,
``close``) and a scripted agent's ``act`` on the env's own event loop, in a daemon thread of
its own. A blocking call inside an ``async def`` (``time.sleep``, a socket read with no
timeout: common in user code) then stalls that env alone. The caller's loop goes on sampling
for the other episodes, and its clocks go on running: the episode's ``episode_timeout_s`` and
the env's ``tool_timeout_s`` end the episode with TIMEOUT, and Ctrl-C still stops the run.

Why a loop per env rather than one shared by all envs: on a shared loop one blocked env would
stall every other episode until the time limit. An env keeps its state on its own loop for its
whole episode (a subagent's view of it, :meth:`GuardedEnv.subagent_env`, shares that loop).

A thread cannot be killed: one still running after its caller gave up (a timeout, Ctrl-C) is
counted as stuck (``env/stuck_threads``, :class:`turnrl.envs.base.UserThreads`) until its code
returns; the env's ``close`` then runs after that code, and the thread ends. Threads are
daemons, ``asyncio.to_thread`` on an env's loop included, so a call that never returns cannot
hold the process at exit.

A watchdog thread probes every watched loop (each env's, and the loops that run episodes) twice
a second. A loop that has not run for ``STALL_S`` seconds is reported once per stall, in one
line naming the env, the call, and the line of code its thread is stuck on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnrl.envs.base import USER_THREADS, StepResult, ToolEnv, mark_env_thread
from turnrl.types import RewardResult, Task, ToolCall

logger = logging.getLogger("turnrl")
BLOCKING_HINT = (
    " (a blocking call in env code: inside async def, make the method a plain def or await "
    "an async call; the episode ends at its time limit)"
)

STALL_S = 5.0  # a watched loop that has not run this long is reported
CLOSE_GRACE_S = 0.2  # how long close waits for a cancelled call to notice before leaving it
CLOSE_S, CLOSE_CANCELLED_S = 30.0, 2.0  # an episode's close; when it was cancelled (Ctrl-C)


def guard(env: ToolEnv) -> ToolEnv:
    """``env`` with its calls on its own event loop (:class:`GuardedEnv`); ``env`` itself when
    it is guarded already (turnrl's own wrappers guard what they wrap)."""
    return env if getattr(env, "guarded", False) else GuardedEnv(env)


class _DaemonExecutor(concurrent.futures.ThreadPoolExecutor):
    """An env loop's default executor (``asyncio.to_thread`` in env code): a daemon thread per
    call, so a call that never returns cannot hold the process at exit (a thread pool's
    workers are joined there)."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:
                future.set_exception(e)

        threading.Thread(target=work, name="env-to-thread", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


class EnvLoop:
    """An event loop run by a daemon thread of its own, for one env (and its sub-envs)."""

    _ids = itertools.count()

    def __init__(self, label: str) -> None:
        self.label = label
        self.slot = USER_THREADS.start()  # RuntimeError when too many threads are stuck
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(_DaemonExecutor(max_workers=1))
        self.calls: dict[int, str] = {}  # calls running on this loop now: id -> what
        self.abandoned: set[int] = set()  # calls whose caller gave up (they may still run)
        self._lock = threading.Lock()  # calls/abandoned change on both threads
        self.stopped = False
        self.plain_calls = [0]  # plain tool methods running here (they may block)
        self.thread = threading.Thread(target=self._serve, name=f"env-{label}", daemon=True)
        self.thread.start()
        WATCHDOG.watch(self.loop, self.thread, self.describe, BLOCKING_HINT)

    def describe(self) -> str | None:
        """What the loop runs, for the watchdog; None while a plain tool method runs (a plain
        method may block: that is what it is for)."""
        if self.plain_calls[0]:
            return None
        with self._lock:  # read from the watchdog's thread
            running = next(iter(self.calls.values()), "its event loop")
        return f"env {self.label}: {running}"

    def _serve(self) -> None:
        self.plain_calls = mark_env_thread()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()
            USER_THREADS.finished(self.slot)

    async def call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on this loop (awaited there when it returns an awaitable), awaited on
        the caller's loop; cancelling the caller cancels it here (when this loop runs)."""
        if self.stopped:
            raise RuntimeError(f"env {self.label}: {what} after the env was closed")
        if not await self.settled():  # queued behind a stuck call, it would never run
            with self._lock:
                stuck = next(iter(self.calls.values()), "a call")
            raise RuntimeError(
                f"env {self.label}: {what} not run: the env's thread is still stuck in {stuck}, "
                f"at {stuck_at(self.thread)}"
            )
        key = next(self._ids)

        plain = not inspect.iscoroutinefunction(fn)  # sync code (an agent's act) may block

        async def here() -> Any:
            with self._lock:
                self.calls[key] = what
            try:
                self.plain_calls[0] += plain
                try:
                    out = fn(*args)
                finally:
                    self.plain_calls[0] -= plain
                return await out if inspect.isawaitable(out) else out
            finally:
                with self._lock:
                    del self.calls[key]
                    self.abandoned.discard(key)

        future = asyncio.run_coroutine_threadsafe(here(), self.loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            with self._lock:
                if key in self.calls:
                    self.abandoned.add(key)
            raise

    async def settled(self, grace_s: float = CLOSE_GRACE_S) -> bool:
        """Whether no call whose caller gave up still runs here, waiting up to ``grace_s`` for
        such calls to notice their cancellation."""
        deadline = time.monotonic() + grace_s
        while self.abandoned and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return not self.abandoned

    def stop(self, then: Callable[[], Any] | None = None) -> None:
        """End the thread: at once when no call runs here, else after the running call returns
        (the thread counts as stuck until then), running ``then()`` (a coroutine function)
        first."""
        if self.stopped:
            return
        self.stopped = True
        if self.abandoned:
            USER_THREADS.abandon(self.slot)

        async def finish() -> None:
            try:
                if then is not None:
                    await then()
            except Exception as e:
                logger.warning(f"warning: env {self.label}: close raised {type(e).__name__}: {e}")
            finally:
                self.loop.stop()

        try:
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(finish()))
        except RuntimeError:  # the loop is closed already
            pass


class GuardedEnv(ToolEnv):
    """``env`` with every call on its own event loop (see the module docstring). Everything
    else (tools, schemas, instructions, anchors) is the wrapped env's."""

    guarded = True

    def __init__(self, env: ToolEnv, *, loop: EnvLoop | None = None) -> None:
        self.env = env
        self.name = env.name
        self.tools = tuple(env.tools)
        self.final_answer = env.final_answer
        self.tool_timeout_s = env.tool_timeout_s
        self.subagent_tools = env.subagent_tools
        self._loop, self._owns_loop = loop, loop is None
        self._instructions: str | None = None
        self._schemas: list[dict[str, Any]] | None = None
        self._measures: dict[str, float] | None = None  # read on the env's loop after each call

    @property
    def instructions(self) -> str:  # type: ignore[override]
        return self.env.instructions if self._instructions is None else self._instructions

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.env.tool_schemas() if self._schemas is None else self._schemas

    def anchor(self, observation: str) -> Any:
        return self.env.anchor(observation)

    def measure(self) -> dict[str, float]:
        """What the env measured of its state after its last call (read on its own loop, so a
        slow measure cannot stop the caller's either)."""
        return self.env.measure() if self._measures is None else self._measures

    async def _measured(self, out: Any) -> Any:
        self._measures = self.env.measure()
        return out

    @property
    def unwrapped(self) -> ToolEnv:
        """The innermost env."""
        env = self.env
        return env.unwrapped if hasattr(env, "unwrapped") else env

    def subagent_env(self) -> ToolEnv | None:
        """The env's own sub-env (None: a view of its state, built by the caller), on this env's
        loop: it shares this env's state."""
        own = self.env.subagent_env()
        return None if own is None else GuardedEnv(own, loop=self._env_loop())

    def _env_loop(self) -> EnvLoop:
        if self._loop is None:
            self._loop = EnvLoop(self.name)
        return self._loop

    def stuck_at(self) -> str | None:
        """Where the env's thread is while a call its caller gave up on still runs."""
        loop = self._loop
        return stuck_at(loop.thread) if loop is not None and loop.abandoned else None

    async def reset(self, task: Task) -> str:
        async def on_env_loop() -> str:
            first = await self.env.reset(task)
            self._instructions = self.env.instructions
            self._schemas = self.env.tool_schemas()
            return await self._measured(first)

        return await self._env_loop().call("reset", on_env_loop)

    async def step(self, call: ToolCall) -> StepResult:
        what = f"tool '{call.name}'"

        async def on_env_loop() -> StepResult:
            return await self._measured(await self.env.step(call))

        try:  # the env's own cap, kept here too: a blocked env loop cannot enforce it
            return await asyncio.wait_for(
                self._env_loop().call(what, on_env_loop), self.tool_timeout_s
            )
        except TimeoutError:
            raise TimeoutError(f"{what} ran past tool_timeout_s={self.tool_timeout_s}") from None

    async def answer(self, text: str) -> StepResult:  # type: ignore[override]
        async def on_env_loop() -> StepResult:
            return await self._measured(await self.env.answer(text))

        return await self._env_loop().call("answer", on_env_loop)

    async def grade(self) -> RewardResult:
        return await self._env_loop().call("grade", self.env.grade)

    async def act(self, agent: Any, observation: str) -> ToolCall | None:
        """``agent.act(observation)`` of a scripted agent (user code too) on this env's loop."""
        return await self._env_loop().call("the scripted agent's act", agent.act, observation)

    async def close(self) -> None:
        """Close the env on its loop. When a call that its caller gave up on still runs there,
        return at once: the close runs after that call, and its thread counts as stuck until
        then."""
        loop = self._env_loop()
        if not await loop.settled():
            if self._owns_loop:
                loop.stop(then=self.env.close)
            return
        try:
            await loop.call("close", self.env.close)
        finally:
            if self._owns_loop:
                loop.stop()


def close_limit_s() -> float:
    """How long an episode waits for its env's ``close``: less when the episode's task is
    being cancelled (Ctrl-C), so a slow close cannot hold a stopping run."""
    task = asyncio.current_task()
    return CLOSE_CANCELLED_S if task is not None and task.cancelling() else CLOSE_S


def origin(e: BaseException) -> str:
    """Where ``e`` was raised: ``file:line in function`` of its innermost frame."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "no traceback"
    path = Path(frames[-1].filename)
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    return f"at {path}:{frames[-1].lineno} in {frames[-1].name}"


async def act(env: ToolEnv, agent: Any, observation: str) -> ToolCall | None:
    """``agent.act(observation)``, on ``env``'s own loop when it has one."""
    if hasattr(env, "act"):
        return await env.act(agent, observation)
    return agent.act(observation)


# -- the watchdog --------------------------------------------------------------------------


class _Watched:
    def __init__(self, loop, thread: threading.Thread, describe, hint: str) -> None:
        self.loop, self.thread, self.describe, self.hint = loop, thread, describe, hint
        self.probe: float | None = None  # when the unanswered probe was sent
        self.reported = False

    def answer(self) -> None:
        self.probe, self.reported = None, False


class Watchdog:
    """Reports event loops that stopped running (see the module docstring)."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self._watched: dict[int, _Watched] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(
        self,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        describe: Callable[[], str | None],
        hint: str = "",
    ) -> None:
        """Watch ``loop`` (run by ``thread``); a stall is reported as ``describe()`` (None: an
        expected stall, not reported), the place ``thread`` is stuck on, and ``hint``."""
        with self._lock:
            self._watched[id(loop)] = _Watched(loop, thread, describe, hint)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="turnrl-watchdog")
                self._thread.daemon = True
                self._thread.start()

    def unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._watched.pop(id(loop), None)

    def _run(self) -> None:
        while True:
            time.sleep(self.every_s)
            try:
                self.check()
            except Exception as e:  # the watchdog must outlive whatever it watches
                logger.debug(f"watchdog: {type(e).__name__}: {e}")

    def check(self) -> None:
        now = time.monotonic()
        with self._lock:
            watched = list(self._watched.items())
        for key, w in watched:
            if w.loop.is_closed() or not w.thread.is_alive():
                with self._lock:
                    self._watched.pop(key, None)
                continue
            if not w.loop.is_running():
                w.probe = None
                continue
            if w.probe is None:
                w.probe = now
                try:
                    w.loop.call_soon_threadsafe(w.answer)
                except RuntimeError:  # closed meanwhile
                    w.probe = None
            elif now - w.probe >= STALL_S and not w.reported:
                what = w.describe()
                if what is None:  # a stall that is expected
                    continue
                w.reported = True
                logger.warning(
                    f"warning: {what}: the event loop has not run for "
                    f"{now - w.probe:.0f} s; its thread is at {stuck_at(w.thread)}{w.hint}"
                )


WATCHDOG = Watchdog()


@contextmanager
def watched_loop(label: str) -> Iterator[None]:
    """Within it, the running event loop (one that runs episodes) is watched as ``label``."""
    loop = asyncio.get_running_loop()
    WATCHDOG.watch(loop, threading.current_thread(), lambda: label)
    try:
        yield
    finally:
        WATCHDOG.unwatch(loop)


_OWN_FILES = tuple(
    f"{os.sep}{name}" for name in ("asyncio", "threading.py", "selectors.py", "concurrent")
) + (str(Path(__file__)),)


def stuck_at(thread: threading.Thread) -> str:
    """Where ``thread`` is now: the innermost frame outside asyncio and this module."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not any(part in path for part in _OWN_FILES):
            return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "an unknown place"
