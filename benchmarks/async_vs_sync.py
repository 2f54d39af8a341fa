"""Sync vs async rollouts on an env whose step latency is long-tailed, at equal trajectory counts.

The env is the guess bandit of the trainer's tests (every task hides 5 in [1, 8], one turn)
wrapped in ``LongTailLatency``: a step sleeps 5 ms, or 2-3 s with probability ``--p-slow``.
Both runs start from the same SFT warm start and train the same number of steps on the same
number of trajectories with the trainer's own ``train_on_batch``. Sync waits for the slowest
episode of every batch; async (``AsyncRollouts``, ``max_staleness`` versions, TIS correction)
hands over whole groups as they finish and keeps the slow ones running.

Prints wall-clock of both, the speedup (target >= 2x) and held-out success of both (sampled,
without the latency wrapper; target within 2 points).

    .venv/bin/python benchmarks/async_vs_sync.py [--steps 30] [--max-staleness 2]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import os
import tempfile
import time
from pathlib import Path

import torch

from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.registry import make_family
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import turn_end_token
from turnrl.rollout.async_rollout import AsyncRollouts
from turnrl.rollout.latency import LatencyFamily
from turnrl.rollout.source import SyncRollouts
from turnrl.rollout.source import sample_requests as requests_of
from turnrl.run.build import build_model, limits_of
from turnrl.run.build import sampling_of as _sampling
from turnrl.run.config import load_config
from turnrl.run.evaluate import evaluate_policy
from turnrl.train.batch import collate
from turnrl.train.step import train_on_batch

BANDIT = [
    "name=bench",
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 8, secret: 5}",
    "rollout.tasks_per_step=4",
    "rollout.group_size=8",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=24",
    "rollout.max_context_tokens=512",
    "sft.enabled=true",
    "sft.episodes=200",
    "sft.noise=0.9",
    "sft.epochs=10",
    "sft.lr=0.003",
    "algo.truncation=zero",  # a wrong guess at the one-turn cap is a failure, not a cut
    "optim.lr=0.001",
    "optim.minibatch_size=32",
    "optim.micro_batch_size=32",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "tiny.layers=2",
    "seed=1",
]


def sample_requests(cfg, tasks, step):
    r = cfg.rollout
    return requests_of(tasks, step, cfg.seed, r.tasks_per_step, r.group_size)


def rollout(cfg, family, requests, renderer, policy, params):
    """One synchronous step's episodes (what a sync run's rollout source does)."""
    r = cfg.rollout
    sync = SyncRollouts(
        lambda step: requests, family.make_env, renderer, policy, params, limits_of(cfg),
        max_concurrency=r.max_concurrency, batch_wait_s=r.batch_wait_s,
    )  # fmt: skip
    return sync.get_batch(0)[0]


def train_run(mode, cfg, family, tasks, model, renderer, pad_id, args) -> tuple[float, dict]:
    model = copy.deepcopy(model)
    policy = HFPolicy(model, pad_id)
    params = _sampling(cfg, renderer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    B = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    stats = {"dropped": 0.0, "staleness_mean": 0.0, "is_weight_mean": 0.0}
    rollouts = None
    t0 = time.monotonic()
    if mode == "async":
        rollouts = AsyncRollouts(
            (sample_requests(cfg, tasks, k) for k in itertools.count()),
            family.make_env,
            renderer,
            policy,
            params,
            limits_of(cfg),
            batch_size=B,
            max_staleness=cfg.max_staleness,
            max_concurrency=cfg.rollout.max_concurrency,
            batch_wait_s=cfg.rollout.batch_wait_s,
        )
    try:
        for step in range(args.steps):
            if rollouts is None:
                requests = sample_requests(cfg, tasks, step)
                trajs = rollout(cfg, family, requests, renderer, policy, params)
            else:
                trajs, m = rollouts.get_batch(step, B)
                stats["dropped"] += m["async/dropped"]
                stats["staleness_mean"] += m["async/staleness_mean"] / args.steps
            batch = collate(trajs, pad_id)
            with policy.lock:
                out = train_on_batch(cfg, model, None, optimizer, batch, step)
                policy.version += 1
            if rollouts is not None:
                rollouts.weights_updated(policy.version)
                stats["is_weight_mean"] += out.get("train/is_weight_mean", 1.0) / args.steps
    finally:
        if rollouts is not None:
            rollouts.close()
    wall = time.monotonic() - t0
    stats["success"] = evaluate(cfg, policy, renderer, params, args)
    return wall, stats


def evaluate(cfg, policy, renderer, params, args) -> float:
    family = make_family(cfg.env.name, cfg.env.options)  # no latency: only the policy matters
    tasks = family.tasks("test", args.eval_tasks, seed=cfg.seed)
    result, _ = asyncio.run(
        evaluate_policy(family, tasks, renderer, policy, params, limits_of(cfg), k=4, seed=7)
    )
    return result.success


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--max-staleness", type=int, default=2)
    ap.add_argument("--p-slow", type=float, default=0.05)
    ap.add_argument("--eval-tasks", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TURNRL_CACHE", str(Path(tempfile.gettempdir()) / "turnrl-bench-cache"))

    cfg = load_config(None, BANDIT + [f"max_staleness={args.max_staleness}"])
    base = make_family(cfg.env.name, cfg.env.options)
    family = LatencyFamily(base, fast_s=0.005, slow_s=(2.0, 3.0), p_slow=args.p_slow, seed=0)
    tasks = base.tasks("train", cfg.env.train_tasks, seed=cfg.seed)
    with tempfile.TemporaryDirectory() as run_dir:
        model, tok = build_model(cfg, base, tasks, Path(run_dir), log=lambda s: None)
    renderer = ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))
    start = evaluate(
        cfg, HFPolicy(model, tok.pad_token_id), renderer, _sampling(cfg, renderer), args
    )

    B = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    print(
        f"{args.steps} steps x {B} trajectories; step latency 5 ms, 2-3 s with p={args.p_slow}; "
        f"SFT start success {start:.3f}"
    )
    sync_s, sync = train_run("sync", cfg, family, tasks, model, renderer, tok.pad_token_id, args)
    print(f"sync : {sync_s:6.1f} s  success {sync['success']:.3f}")
    acfg = cfg.model_copy(deep=True)
    acfg.algo.is_correction = "tis"
    async_s, asy = train_run("async", acfg, family, tasks, model, renderer, tok.pad_token_id, args)
    print(
        f"async: {async_s:6.1f} s  success {asy['success']:.3f}  (max_staleness "
        f"{cfg.max_staleness}, mean staleness {asy['staleness_mean']:.2f}, dropped "
        f"{asy['dropped']:.0f}, IS weight mean {asy['is_weight_mean']:.3f})"
    )
    print(
        f"speedup {sync_s / async_s:.2f}x (target >= 2x); success gap "
        f"{100 * abs(sync['success'] - asy['success']):.1f} points (target <= 2)"
    )


if __name__ == "__main__":
    main()
