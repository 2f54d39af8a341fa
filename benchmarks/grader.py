"""Grading time per code-env episode: this tree against a baseline git ref (default ``main``),
on tier-1 tasks.

The baseline's ``src/`` is extracted with ``git archive``; each variant runs in its own
subprocess (two versions of turnrl cannot share one), and the two alternate round by round so
both see the same machine load. Each round grades ``--tasks`` tasks x ``--group`` episodes
(half the gold fix, half the untouched bug, as a GRPO group mixes right and wrong answers),
``--concurrency`` at a time, each env with no shared run cache. Reported: wall-clock seconds
of grading per episode (total time / episodes) and the mean latency of one ``grade()``.

    .venv/bin/python benchmarks/grader.py [--ref main] [--rounds 3] [--tasks 4] [--group 8] [--spread]

A task's first grading in a process also records the hidden tests' calls on the gold solution
(one pytest run, kept for the process's later gradings of it): with groups of 8, one in eight
episodes pays it here, fewer in training, where tasks come back across steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


async def _episodes(n_tasks: int, group: int, concurrency: int, spread: bool) -> dict[str, float]:
    from turnrl.envs.code import CodeEnv
    from turnrl.envs.code.tasks import load_tasks

    tasks = [t for t in load_tasks("train") if t.payload.get("tier") == 1]
    if spread:  # one task per module: no task shares another's recording run
        tasks = list({t.payload["module"]: t for t in reversed(tasks)}.values())[::-1]
    tasks = tasks[:n_tasks]
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    successes = 0

    async def one(task, fixed: bool) -> None:
        nonlocal successes
        async with gate:
            env = CodeEnv()
            await env.reset(task)
            if fixed:
                for path, text in task.payload["gold_patch"].items():
                    env.write_file(path, text)
            start = time.perf_counter()
            result = await env.grade()
            latencies.append(time.perf_counter() - start)
            successes += bool(result.success)
            await env.close()

    start = time.perf_counter()
    await asyncio.gather(*(one(t, j % 2 == 0) for t in tasks for j in range(group)))
    wall = time.perf_counter() - start
    n = len(tasks) * group
    return {"episodes": n, "wall": wall, "latency": statistics.mean(latencies), "ok": successes}


def _worker(args: argparse.Namespace) -> None:
    out = asyncio.run(_episodes(args.tasks, args.group, args.concurrency, args.spread))
    print(json.dumps(out))


def _baseline_src(ref: str, dest: Path) -> Path:
    archive = dest / "src.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)  # the trainer's default group_size
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument(
        "--spread", action="store_true", help="tasks of different modules (default: the first)"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="turnrl-bench-") as tmp:
        trees = {"before": _baseline_src(args.ref, Path(tmp)), "after": REPO / "src"}
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for r in range(args.rounds):
            for label, src in trees.items():
                env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
                cmd = [sys.executable, __file__, "--worker", "--tasks", str(args.tasks)]
                cmd += ["--group", str(args.group), "--concurrency", str(args.concurrency)]
                cmd += ["--spread"] if args.spread else []
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                runs[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
                last = runs[label][-1]
                print(
                    f"round {r} {label:>6}: {last['wall'] / last['episodes']:.3f} s/episode, "
                    f"grade() latency {last['latency']:.2f} s, {last['ok']}/{last['episodes']} ok",
                    flush=True,
                )
    per = {k: sum(x["wall"] for x in v) / sum(x["episodes"] for x in v) for k, v in runs.items()}
    lat = {k: statistics.mean(x["latency"] for x in v) for k, v in runs.items()}
    where = "of different modules" if args.spread else "(the first)"
    print(
        f"tier 1, {args.tasks} tasks {where} x {args.group} episodes x {args.rounds} rounds "
        "per variant"
    )
    print(f"before ({args.ref}): {per['before']:.3f} s/episode, latency {lat['before']:.2f} s")
    print(f"after  (this tree): {per['after']:.3f} s/episode, latency {lat['after']:.2f} s")
    print(f"ratio after / before: {per['after'] / per['before']:.2f} (s/episode)")


if __name__ == "__main__":
    main()
