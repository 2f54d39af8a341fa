"""Shared test runs in the code env: the env work of GRPO steps, with and without the family's
run cache.

Each step plays ``--tasks`` tier-0 tasks x ``--group`` episodes concurrently, with the noisy
scripted expert (noise 0.3, the warm start's demonstrator) standing in for the policy, and
grades them: the env side of the default run's rollouts, without the model. The same episodes
are played by envs sharing one cache (``CodeFamily.make_env``) and by envs that run every
test themselves (``CodeEnv`` alone), alternating, ``--steps`` times each.

    .venv/bin/python benchmarks/code_env_runs.py [--steps 3] [--tasks 4] [--group 8]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from turnrl.envs.code import CodeEnv, CodeFamily
from turnrl.envs.scripted import run_scripted


async def one_step(
    family: CodeFamily, tasks, group: int, shared: bool, seed: int
) -> tuple[list[bool], int]:
    """Success of each episode, and the number of sandboxed test runs the step made."""
    plays = [(task, seed + j) for task in tasks for j in range(group)]
    envs = [family.make_env() if shared else CodeEnv(limits=family.limits) for _ in plays]
    episodes = await asyncio.gather(
        *(
            run_scripted(env, task, family.expert(task, seed=s, noise=0.3), max_turns=6)
            for env, (task, s) in zip(envs, plays, strict=True)
        )
    )
    runs = family.run_cache.misses if shared else sum(env.run_cache.misses for env in envs)
    return [bool(ep.result and ep.result.success) for ep in episodes], runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    args = ap.parse_args()
    pool = CodeFamily(tiers=[0]).tasks("train", None, seed=0)
    times: dict[bool, list[float]] = {True: [], False: []}
    runs: dict[bool, int] = {True: 0, False: 0}
    for step in range(args.steps):
        tasks = pool[step * args.tasks : (step + 1) * args.tasks]
        results = {}
        for shared in (False, True):
            family = CodeFamily(tiers=[0])  # a fresh cache per step: no reuse across steps
            start = time.perf_counter()
            results[shared], n = asyncio.run(
                one_step(family, tasks, args.group, shared, 100 * step)
            )
            times[shared].append(time.perf_counter() - start)
            runs[shared] += n
        assert results[True] == results[False], "shared runs changed a grade"
        print(
            f"step {step}: every run {times[False][-1]:.2f} s, shared {times[True][-1]:.2f} s, "
            f"success {sum(results[True])}/{len(results[True])}"
        )
    episodes = args.steps * args.tasks * args.group
    plain, shared = sum(times[False]), sum(times[True])
    print(f"{episodes} episodes per variant ({args.tasks} tasks x {args.group} per step)")
    print(
        f"every test run:   {plain / args.steps:.2f} s per step, {runs[False]} sandboxed runs "
        f"({runs[False] / episodes:.2f} per episode)"
    )
    print(
        f"shared test runs: {shared / args.steps:.2f} s per step, {runs[True]} sandboxed runs "
        f"({runs[True] / episodes:.2f} per episode)"
    )
    print(f"ratio shared / every run: {shared / plain:.2f}")


if __name__ == "__main__":
    main()
