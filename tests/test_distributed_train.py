"""Data-parallel training on real torch.distributed processes (gloo, CPU): two processes compute
what one computes (DDP and FSDP2), a killed two-process run resumes exactly, and torchrun through
the real CLI writes one set of outputs."""

from __future__ import annotations

import math
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.test_step import tiny_lm, uneven_batch
from turnrl.algo.critic import TurnCritic
from turnrl.train.config import load_config
from turnrl.train.distributed import Dist
from turnrl.train.step import train_on_batch

# (strategy, advantage): FSDP2 shards the policy; the critic's head stays outside under DDP
CASES = [("ddp", "grpo"), ("fsdp2", "grpo"), ("ddp", "gae_turn")]


def step_cfg(advantage: str):
    return load_config(
        None,
        [
            "env.name=guess",
            f"algo.advantage={advantage}",
            "algo.kl_coef=0.1",  # a reference pass and a proximal pass through the wrapper
            "algo.entropy_coef=0.01",
            "algo.is_correction=tis",
            "algo.truncation=mask",
            "optim.lr=0.01",
            "optim.minibatch_size=4",  # 5 rows: minibatches of 4 and 1 (one rank idles)
            "optim.micro_batch_size=1",  # ranks with unequal pass counts
        ],
    )


def one_step(advantage: str, d: Dist | None):
    """One train_on_batch on the shared toy batch: (metrics, full weights, per-token records)."""
    cfg = step_cfg(advantage)
    model = tiny_lm()
    ref = tiny_lm(seed=1).requires_grad_(False)
    critic = None
    if advantage == "gae_turn":
        critic = TurnCritic.sharing(model).double()
        torch.nn.init.normal_(
            critic.value_head.weight, std=0.5, generator=torch.Generator().manual_seed(0)
        )
    if d is not None:
        d.wrap(model)
    params = [*model.parameters(), *(critic.parameters() if critic is not None else [])]
    opt = torch.optim.AdamW(params, lr=cfg.optim.lr)
    per_token: dict[str, torch.Tensor] = {}
    m = train_on_batch(
        cfg,
        model,
        ref,
        opt,
        uneven_batch(),
        0,
        critic=critic,
        log=lambda s: None,
        per_token=per_token,
        dist=d,
    )
    weights = d.full_state(model) if d is not None else dict(model.state_dict())
    if critic is not None:
        weights |= {f"critic.{k}": v for k, v in critic.state_dict().items()}
    return m, weights, per_token


def _worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        results = {}
        for strategy, advantage in CASES:
            d = Dist(rank=rank, world=world, strategy=strategy)
            results[strategy, advantage] = one_step(advantage, d)
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_train_exactly_as_one(tmp_path):
    out = tmp_path / "two.pt"
    mp.spawn(_worker, args=(2, free_port(), str(out)), nprocs=2, join=True)
    two = torch.load(out, weights_only=False)
    for strategy, advantage in CASES:
        m1, w1, pt1 = one_step(advantage, None)
        m2, w2, pt2 = two[strategy, advantage]
        assert m1["train/rows"] == 5 and m1["train/skipped_steps"] == 0
        assert set(m1) == set(m2), (strategy, advantage)
        for k in m1:
            assert math.isclose(m1[k], m2[k], rel_tol=1e-5, abs_tol=1e-7), (strategy, advantage, k)
        assert set(w1) == set(w2)
        before = dict(tiny_lm().state_dict())
        moved = [k for k in before if not torch.equal(before[k], w1[k])]
        assert moved, "the step changed no weight"
        for k in w1:
            torch.testing.assert_close(w2[k], w1[k], rtol=1e-5, atol=1e-5, msg=f"{strategy} {k}")
        for k in ("advantages", "trainer_logprobs", "ratios"):
            torch.testing.assert_close(pt2[k], pt1[k], rtol=1e-5, atol=1e-5, equal_nan=True)
