"""Sandbox overhead: one sandboxed `python -c pass` against the same command as a plain
subprocess, and 32 concurrent sandboxed pytest runs against 32 plain ones.

Target: sandbox p50 under 1.5x plain, or under 30 ms added.

    .venv/bin/python benchmarks/sandbox.py [--runs 50] [--concurrent 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from turnrl.sandbox import Limits, run_in_sandbox, sandbox_backend

PASS = [sys.executable, "-c", "pass"]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
TEST_FILE = "def test_one():\n    assert sum(range(10)) == 45\n"


async def plain(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    await proc.communicate()
    assert proc.returncode in (0, None), proc.returncode
    return time.perf_counter() - start


async def sandboxed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    result = await run_in_sandbox(argv, cwd, Limits(wall_seconds=120))
    assert result.returncode == 0, result.output
    return time.perf_counter() - start


def percentiles(seconds: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(seconds, n=20, method="inclusive")  # q[9] = p50, q[18] = p95
    return q[9] * 1e3, q[18] * 1e3


async def main(runs: int, concurrent: int) -> None:
    with tempfile.TemporaryDirectory(prefix="turnrl-bench-") as tmp:
        root = Path(tmp)
        workspaces = [root / f"ws{i}" for i in range(concurrent)]
        for ws in workspaces:
            ws.mkdir()
            (ws / "test_one.py").write_text(TEST_FILE)

        await sandboxed(PASS, workspaces[0])  # warm caches and the backend probe
        await plain(PASS, workspaces[0])
        plain_s, sandbox_s = [], []
        for _ in range(runs):  # interleaved so machine load affects both alike
            plain_s.append(await plain(PASS, workspaces[0]))
            sandbox_s.append(await sandboxed(PASS, workspaces[0]))
        (p50, p95), (s50, s95) = percentiles(plain_s), percentiles(sandbox_s)

        start = time.perf_counter()
        await asyncio.gather(*(plain(PYTEST, ws) for ws in workspaces))
        plain_wall = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(sandboxed(PYTEST, ws) for ws in workspaces))
        sandbox_wall = time.perf_counter() - start

    ratio, added = s50 / p50, s50 - p50
    load = os.getloadavg()[0]
    print(
        f"backend: {sandbox_backend()}   runs: {runs}   load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"python -c pass   plain   p50 {p50:7.1f} ms   p95 {p95:7.1f} ms")
    print(f"python -c pass   sandbox p50 {s50:7.1f} ms   p95 {s95:7.1f} ms")
    print(f"sandbox/plain p50 ratio {ratio:.2f}x, added {added:.1f} ms")
    print(
        f"{concurrent} concurrent pytest runs: plain {plain_wall:.2f} s, sandbox {sandbox_wall:.2f} s"
    )
    print(f"   ratio {sandbox_wall / plain_wall:.2f}x")
    met = ratio < 1.5 or added < 30.0
    print(f"target (p50 < 1.5x plain or < 30 ms added): {'MET' if met else 'MISSED'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.concurrent))
