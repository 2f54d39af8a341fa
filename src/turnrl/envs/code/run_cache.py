"""Test runs shared between the episodes of one env family: one pytest run per distinct tree.

A GRPO group plays one task several times, and many of its episodes reach the same files: the
untouched repository (an agent that gave up), the right fix, the same wrong fix. The tests
then say the same thing, so one sandboxed pytest run can answer all of them: with the default
run's noisy demonstrator playing its tasks, 7 runs in 10 repeated an earlier one
(benchmarks/code_env_runs.py).

A result is reused only when the run finished on its own (no timeout, no kill): those depend
on the machine's load, not on the files. Reuse assumes the tests are a function of the files,
which a grader needs anyway (a flaky hidden test is a noisy reward). Episodes that ask for the
same run at the same moment wait for one run instead of starting their own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Any

_SKIP_DIRS = {"__pycache__", ".pytest_cache"}


def tree_digest(root: Path) -> str:
    """Hash of every file's relative path and bytes under ``root`` (caches excluded)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if _SKIP_DIRS.intersection(rel.parts):
            continue
        if path.is_symlink():  # part of the tree: its target's name, never what it points to
            h.update(b"L" + str(rel).encode() + b"\0" + str(path.readlink()).encode() + b"\0")
        elif path.is_file():
            h.update(b"F" + str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class RunCache:
    """Results by key, computed once; at most ``max_entries`` kept (least recently used go)."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._done: OrderedDict[Hashable, Any] = OrderedDict()
        self._running: dict[Hashable, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    async def get(
        self,
        key: Hashable,
        compute: Callable[[], Awaitable[Any]],
        keep: Callable[[Any], bool] = lambda _: True,
    ) -> Any:
        """``compute()``'s result for ``key``, from the cache when an equal run finished before.
        ``keep(result)`` says whether the result may serve later calls. Callers may sit on
        different event loops (each env runs on its own): a run in flight on one serves the
        others through a thread-safe future."""
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    return self._done[key]
                running = self._running.get(key)
                if running is None or running.cancelled():
                    future: concurrent.futures.Future = concurrent.futures.Future()
                    self._running[key] = future
                    self.misses += 1
                    break
            try:
                result = await asyncio.shield(asyncio.wrap_future(running))
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this caller was cancelled
                continue  # the run it waited for was cancelled: look again, then run it here
            with self._lock:
                self.hits += 1
            return result
        try:
            result = await compute()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as e:
            future.set_exception(e)
            raise
        else:
            if keep(result):
                with self._lock:
                    self._done[key] = result
                    while len(self._done) > self.max_entries:
                        self._done.popitem(last=False)
            future.set_result(result)
            return result
        finally:
            with self._lock:
                if self._running.get(key) is future:
                    del self._running[key]
