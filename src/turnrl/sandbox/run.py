"""Run one untrusted command in a sandbox and turn whatever it does into a `SandboxResult`.

A hostile command (fork bomb, memory bomb, endless loop, output flood, network, writes outside
the workspace, signals to its parent) must end as a result the caller can show to the model, never
as an exception or a hung trainer. Confinement itself lives in `backends.py`; this module adds the
wall-clock timeout (SIGKILL to the whole process group; the PID namespace takes everything else
with it), the output cap, and the reporting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from turnrl.sandbox.backends import (
    SANDBOX_HOME,
    Backend,
    Limits,
    prepare_workspace,
    sandbox_argv,
    sandbox_backend,
    warn_if_weak,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

_DRAIN_GRACE_S = 2.0  # after the command ends, how long to wait for the pipe to close

# Output that says the command died of its memory limit (RLIMIT_AS makes allocations fail).
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


@dataclass
class SandboxResult:
    returncode: int | None  # None if killed before exit; 128+N when the command died of signal N
    output: str  # stdout+stderr interleaved, capped with a visible truncation marker
    timed_out: bool
    output_truncated: bool
    killed_reason: str | None  # "timeout", "memory", "cpu", "file size", "signal N", when known
    backend: str  # "bwrap", "unshare" (fallback) or "none"
    duration_s: float
    workdir: str = ""  # the command's cwd as it saw it: "/workspace" under bwrap, else host path

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def finished(self) -> bool:
        """It ended on its own: no timeout or limit killed it (those depend on the load)."""
        return not self.timed_out and self.killed_reason is None


class CappedOutput:
    """Keeps the first and last halves of a byte stream, counting what falls in between.

    Memory stays O(cap) however much is fed; the tail is kept because test summaries and
    tracebacks end there.
    """

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self.tail_cap == 0:
            return
        self.tail += chunk
        if len(self.tail) > 2 * self.tail_cap:  # trim rarely: amortised O(1) per byte
            del self.tail[: -self.tail_cap]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - min(len(self.tail), self.tail_cap)

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_cap :]) if self.tail_cap else b""
        head = self.head.decode(errors="replace")
        if self.omitted == 0:
            return (bytes(self.head) + tail).decode(errors="replace")
        marker = f"\n[... output truncated: {self.omitted} bytes omitted ...]\n"
        return head + marker + tail.decode(errors="replace")


def clean_env(workdir: str, extra: dict[str, str] | None) -> dict[str, str]:
    """A fresh environment: nothing of the trainer's (tokens, paths) leaks in."""
    env = {
        "PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_HOME,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PWD": workdir,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # keeps stdout and stderr interleaved in true order
        # RLIMIT_AS counts reserved address space: keep thread pools and malloc arenas from
        # reserving a per-core share of it, and many sandboxes from oversubscribing the CPUs.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }
    return {**env, **(extra or {})}


def killed_reason(returncode: int | None, timed_out: bool, output: str) -> str | None:
    if timed_out:
        return "timeout"
    if returncode is None or returncode == 0:
        return None
    if any(marker in output for marker in _MEMORY_MARKERS):
        return "memory"
    if returncode > 128:
        signum = returncode - 128
        return {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file size"}.get(signum, f"signal {signum}")
    return None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Capture(asyncio.Protocol):
    """Feeds the command's output pipe into a `CappedOutput`; resolves ``eof`` when it closes."""

    def __init__(self, out: CappedOutput, eof: asyncio.Future[None]) -> None:
        self.out = out
        self.eof = eof

    def data_received(self, data: bytes) -> None:
        self.out.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.eof.done():
            self.eof.set_result(None)


async def _feed_stdin(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


async def run_in_sandbox(
    command: str | list[str],
    workspace: Path,
    limits: Limits = Limits(),  # noqa: B008 - frozen, so a shared default is safe
    *,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    extra_ro_binds: Sequence[Path] = (),
    network: bool = False,
    backend: Backend | None = None,
) -> SandboxResult:
    """Run ``command`` with ``workspace`` as its writable cwd; never raises for what it does.

    A str command runs through ``/bin/sh -c``. Under bwrap the workspace is mounted at
    ``/workspace`` (so paths in output do not depend on where the host keeps it); the weaker
    backends run in the host path (``SandboxResult.workdir`` says which). ``backend`` overrides
    ``sandbox_backend()``. Setup errors (missing workspace, bad backend) do raise.
    """
    workspace = Path(workspace).resolve()
    if not workspace.is_dir():
        raise ValueError(f"sandbox workspace {workspace} is not a directory")
    chosen = backend or sandbox_backend()
    warn_if_weak(chosen)
    prefix, workdir = sandbox_argv(
        chosen, workspace, limits, network=network, extra_ro_binds=extra_ro_binds
    )
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    prepare_workspace(workspace)

    loop = asyncio.get_running_loop()
    out = CappedOutput(limits.max_output_bytes)
    eof: asyncio.Future[None] = loop.create_future()
    # Our own pipe rather than asyncio's: its proc.wait() also waits for the pipes to close, so a
    # background process still holding stdout would make a finished command look hung.
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *prefix,
            *argv,
            cwd=workspace,
            env=clean_env(workdir, env),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,  # own process group, so one killpg reaches all of it
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    pipe_file = open(read_fd, "rb", buffering=0)  # noqa: SIM115 - the transport closes it
    pipe: asyncio.ReadTransport | None = None
    feeder: asyncio.Task[None] | None = None
    timed_out = False
    try:
        pipe, _ = await loop.connect_read_pipe(lambda: _Capture(out, eof), pipe_file)
        if stdin is not None:
            feeder = asyncio.create_task(_feed_stdin(proc, stdin.encode()))
        try:
            await asyncio.wait_for(proc.wait(), limits.wall_seconds)
        except TimeoutError:
            timed_out = True
        # After a timeout this is the kill (the PID namespace takes the rest with it); after a
        # normal exit it ends stragglers in the namespace-less "none" backend's process group.
        _kill_group(proc.pid)
        await proc.wait()
        # A process outside the group (only possible without namespaces) may hold the pipe.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(eof), _DRAIN_GRACE_S)
    finally:  # also when cancelled: leave nothing running behind
        if proc.returncode is None:
            _kill_group(proc.pid)
        if pipe is None:
            pipe_file.close()
        else:
            pipe.close()
        if feeder is not None:
            feeder.cancel()
    duration_s = time.perf_counter() - start

    returncode = proc.returncode
    if timed_out:
        returncode = None
    elif returncode is not None and returncode < 0:
        returncode = 128 - returncode  # shell convention, as bwrap reports it
    output = out.text()
    return SandboxResult(
        returncode=returncode,
        output=output,
        timed_out=timed_out,
        output_truncated=out.omitted > 0,
        killed_reason=killed_reason(returncode, timed_out, output),
        backend=chosen,
        duration_s=duration_s,
        workdir=workdir,
    )
