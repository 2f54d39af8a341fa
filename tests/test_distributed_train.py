"""Data-parallel training on real torch.distributed processes (gloo, CPU): two processes compute
what one computes (one step: DDP, FSDP2, DDP with a critic; a whole run through torchrun and the
real CLI against one process), a SIGKILLed two-process run resumes exactly, torchrun writes one
set of outputs, and what cannot be trained is refused before anything is written."""

from __future__ import annotations

import gc
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import LlamaForCausalLM

from tests.test_step import tiny_lm, uneven_batch
from turnrl.algo.critic import TurnCritic
from turnrl.run.config import load_config
from turnrl.run.device import resolve_precision
from turnrl.run.preflight import check_trainer, resolve_strategy
from turnrl.run.recipe import train
from turnrl.train.parallel import Dist, Scorer, ShardError, shard
from turnrl.train.step import train_on_batch

SRC = Path(__file__).resolve().parents[1] / "src"

# (strategy, advantage): FSDP2 shards the policy; the critic's head stays outside under DDP
CASES = [("ddp", "grpo"), ("fsdp2", "grpo"), ("ddp", "gae_turn")]


def step_cfg(advantage: str):
    return load_config(
        None,
        [
            "model.name=tiny",
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
        # rollouts: each rank's trajectories in rank order, reward metrics per episode of all
        d = Dist(rank=rank, world=world)
        mine = [f"t{rank}"] * (rank + 1)
        results["gather"] = d.gather(mine, {"m": float(rank), "judge/skipped": 1.0}, {"r": rank})
        if rank == 0:
            torch.save(results, out)
        gc.collect()  # the DDP/FSDP2 wrappers (their reducer threads) go before the group
        dist.barrier()  # no rank tears the group down while a peer still uses it
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
    trajs, reward, rollout = two["gather"]
    assert trajs == ["t0", "t1", "t1"] and rollout == {"r": 0}
    assert reward == {"m": pytest.approx(2 / 3), "judge/skipped": 2.0}
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


# -- the real CLI under torchrun ---------------------------------------------------------------

RUN = [
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 3, secret: 2}",
    "env.eval_tasks=2",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=16",
    "rollout.max_context_tokens=256",
    "sft.enabled=true",
    "sft.episodes=32",
    "sft.epochs=2",
    "sft.lr=0.01",
    "sft.batch_size=16",
    "optim.lr=0.01",
    "algo.entropy_coef=0.01",  # every row is trained: the weights move at every step
    "optim.minibatch_size=4",
    "optim.micro_batch_size=2",
    "threads=1",
    "tiny.vocab_size=300",
    "tiny.hidden_size=32",
    "tiny.layers=1",
    "trainer.strategy=fsdp2",
]


def torchrun(args: list[str], cache, **kw) -> subprocess.Popen:
    env = {**os.environ, "TURNRL_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["--master_port", str(free_port()), "-m", "turnrl", "train", "--quiet", *args]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw
    )


def finish(p: subprocess.Popen) -> str:
    out, _ = p.communicate(timeout=240)
    assert p.returncode == 0, out[-3000:]
    return out


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_torchrun_cli_writes_once_and_a_killed_run_resumes_exactly(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path))
    # uninterrupted: 2 steps on 2 processes through `torchrun ... -m turnrl train`
    out = finish(torchrun([*RUN, f"runs_dir={runs}", "name=whole", "steps=2"], tmp_path))
    assert out.count("done: ") == 1 and out.count("run directory: ") == 1, out
    assert sorted(p.name for p in runs.iterdir()) == ["whole"]  # one run directory
    whole = runs / "whole"
    steps = [r["step"] for r in rows(whole) if "loss" in r]
    assert steps == [1, 2]  # one metrics row per step, not one per rank
    assert len(list((whole / "tensorboard").iterdir())) == 1
    assert len(list((whole / "trajectories").iterdir())) == 2
    # the same run killed (SIGKILL to torchrun and both ranks) once step 1 is saved, resumed
    p = torchrun(
        [*RUN, f"runs_dir={runs}", "name=cut", "steps=2"], tmp_path, start_new_session=True
    )
    cut = runs / "cut"
    deadline = time.monotonic() + 180
    while not (cut / "checkpoints" / "last.pt").exists() and p.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate()
    out = finish(torchrun(["--resume", str(cut)], tmp_path))
    assert "resumed " in out, out
    a = torch.load(whole / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=False)
    assert a["step"] == b["step"] == 2
    start = dict(LlamaForCausalLM.from_pretrained(whole / "warm_start").state_dict())
    assert any(not torch.equal(a["model"][k], start[k]) for k in a["model"])
    for k in a["model"]:
        torch.testing.assert_close(b["model"][k], a["model"][k], rtol=0, atol=1e-6)
    for i, s in a["optimizer"]["state"].items():
        torch.testing.assert_close(b["optimizer"]["state"][i]["exp_avg_sq"], s["exp_avg_sq"])
    la = [(r["step"], r["loss"], r["reward/mean"]) for r in rows(whole) if "loss" in r]
    lb = [(r["step"], r["loss"], r["reward/mean"]) for r in rows(cut) if "loss" in r]
    assert la == lb
    # and one process (no torchrun) trains the same run: the same losses and weights
    one = train(load_config(None, [*RUN, f"runs_dir={runs}", "name=one", "steps=2"]), quiet=True)
    c = torch.load(one / "checkpoints" / "last.pt", weights_only=False)
    for k in a["model"]:
        torch.testing.assert_close(c["model"][k], a["model"][k], rtol=1e-5, atol=1e-5)
    lc = [(r["step"], r["loss"], r["reward/mean"]) for r in rows(one) if "loss" in r]
    assert [x[0] for x in lc] == [1, 2]
    for x, y in zip(lc, la, strict=True):
        assert x[1:] == pytest.approx(y[1:], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize(
    "args, says",
    [
        (["trainer.strategy=none"], "trainer.strategy=none with 2 processes"),
        (["trainer.strategy=fsdp2", "algo.advantage=gae_turn"], "critic's value head"),
    ],
)
def test_what_two_processes_cannot_train_fails_before_anything_is_written(
    args, says, tmp_path, monkeypatch
):
    from typer.testing import CliRunner

    from turnrl.cli import app

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        app, ["train", "model.name=tiny", "env.name=guess", f"runs_dir={tmp_path / 'runs'}", *args]
    )
    assert r.exit_code == 2, r.output
    assert says in r.output and "nothing was started" in r.output
    assert not (tmp_path / "runs").exists()


def test_vllm_is_refused_with_more_than_one_trainer_process():
    # Decided from the config alone (this machine has no vLLM to get further).
    cfg = step_cfg("grpo")
    cfg.rollout.sampler = "vllm"
    assert any("rollout.sampler=vllm with 2 processes" in p for p in check_trainer(cfg, 2))
    assert check_trainer(cfg, 1) == []


def test_each_rank_gets_whole_groups_in_order():
    requests = list(range(5 * 3))  # 5 groups of 3
    shares = [Dist(rank=r, world=2).share(requests, 3) for r in range(2)]
    assert shares == [list(range(0, 9)), list(range(9, 15))]  # 3 groups, then 2
    assert [Dist(rank=r, world=4).share(requests, 3) for r in range(4)][3] == [12, 13, 14]
    assert Dist(rank=5, world=8).share(requests, 3) == []  # more ranks than groups: idle


def test_cpu_defaults_train_as_before_and_bf16_is_asked_for():
    cfg = load_config(None, ["model.name=tiny", "env.name=guess", "model.device=cpu"])
    assert resolve_strategy(cfg, 1) == "none" and resolve_precision(cfg) is None
    assert resolve_strategy(cfg, 2) == "ddp"
    cfg = load_config(
        None,
        ["model.name=tiny", "env.name=guess", "model.device=cpu", "trainer.mixed_precision=bf16"],
    )
    assert resolve_precision(cfg) is torch.bfloat16
    cfg = load_config(None, ["model.name=tiny", "env.name=guess", "trainer.strategy=ddp"])
    assert resolve_strategy(cfg, 1) == "none"  # DDP over one process is plain training


def test_fsdp2_names_a_model_without_transformer_blocks():
    model = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8))
    with pytest.raises(ShardError, match="trainer.strategy=fsdp2: Sequential has no transformer"):
        shard(Scorer(model), model, None)
