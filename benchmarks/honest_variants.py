"""Honest fixes that differ from the gold fix, graded like any episode: all must get reward 1
and (nearly) none a flag. Also reports, per tier, the share of tasks whose grading included
hidden-only checks (calls on inputs drawn at grading time, which no visible or hidden test
holds).

For each task an equivalent correct fix is generated from the gold module
(:func:`turnrl.envs.code.variants.equivalent_fix`: renamed locals, mirrored comparisons,
swapped if/else, an extra helper, docstrings and comments, reordered functions), written over
the buggy module by a scripted agent, submitted and graded by the code env.

    .venv/bin/python benchmarks/honest_variants.py [--per-tier 60] [--tiers 0 1 2 3] [--workers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

from turnrl.envs.code import CodeEnv
from turnrl.envs.code.micro import micro_tasks
from turnrl.envs.code.tasks import load_tasks
from turnrl.envs.code.variants import equivalent_fix
from turnrl.envs.scripted import run_scripted
from turnrl.types import Task, ToolCall


def pick(tiers: list[int], per_tier: int, seed: int) -> list[Task]:
    """``per_tier`` tasks of each tier, both splits, drawn by ``seed``."""
    pool = load_tasks("train") + load_tasks("test") + micro_tasks("train") + micro_tasks("test")
    out = []
    for tier in tiers:
        ts = sorted((t for t in pool if t.payload.get("tier", 1) == tier), key=lambda t: t.id)
        random.Random(f"{seed}/{tier}").shuffle(ts)
        out += ts[:per_tier]
    return out


async def grade_variant(task: Task, seed: int) -> tuple[Task, object]:
    calls = [
        ToolCall("write_file", {"path": path, "content": equivalent_fix(text, seed)})
        for path, text in sorted(task.payload["gold_patch"].items())
        if path.endswith(".py") and text is not None
    ]
    plan = [*calls, ToolCall("submit", {})]
    agent = type("Scripted", (), {"act": lambda self, obs: plan.pop(0)})()
    episode = await run_scripted(CodeEnv(), task, agent, max_turns=len(plan) + 1)
    return task, episode.result


async def run(tasks: list[Task], workers: int, seed: int) -> list[tuple[Task, object]]:
    gate = asyncio.Semaphore(workers)

    async def one(task: Task) -> tuple[Task, object]:
        async with gate:
            return await grade_variant(task, seed)

    return await asyncio.gather(*(one(t) for t in tasks))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-tier", type=int, default=60)
    ap.add_argument("--tiers", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    tasks = pick(args.tiers, args.per_tier, args.seed)
    start = time.perf_counter()
    results = asyncio.run(run(tasks, args.workers, args.seed))
    elapsed = time.perf_counter() - start
    print(f"{len(results)} tasks, one equivalent fix each, graded in {elapsed:.0f} s")
    print("tier  tasks  reward 1  flagged  hidden-only checks")
    rows = []
    for tier in [*args.tiers, None]:
        group = [(t, r) for t, r in results if tier is None or t.payload.get("tier", 1) == tier]
        if not group:
            continue
        n = len(group)
        paid = sum(r.reward == 1.0 for _, r in group) / n
        flagged = sum(bool(r.flags) for _, r in group) / n
        hidden = sum(r.components.get("hidden_checks", 0) > 0 for _, r in group) / n
        label = "all" if tier is None else str(tier)
        print(f"{label:>4}  {n:>5}  {paid:>7.1%}  {flagged:>7.1%}  {hidden:>17.1%}")
        rows.append((paid, flagged))
    bad = [(t, r) for t, r in results if r.reward != 1.0 or r.flags]
    for t, r in bad[:20]:
        diff = r.info.get("differential") or {}
        print(
            f"  {t.id}: reward {r.reward} flags {r.flags} tests {r.info['tests']} "
            f"mismatched {diff.get('mismatched_tests')} fresh {diff.get('fresh_mismatches')}"
        )
    paid, flagged = rows[-1]
    return 0 if paid == 1.0 and flagged <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
