"""One real training step for every value of every enumerated training option.

Each case runs :func:`turnrl.run.recipe.train` for one step on a tiny guess task (a noisy warm
start, so rewards are mixed) and checks that the loss is finite and that the policy's weights
moved. A config option that exists but does nothing, or crashes, fails here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from turnrl.policy.vllm import NEEDS as VLLM_NEEDS
from turnrl.policy.vllm import vllm_available
from turnrl.run.config import ConfigError, load_config
from turnrl.run.recipe import train

TINY = [
    "name=opt",
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 4}",
    "env.eval_tasks=2",
    "env.train_tasks=8",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=3",
    "rollout.max_new_tokens=16",
    "rollout.max_context_tokens=256",
    "sft.enabled=true",
    "sft.episodes=128",
    "sft.noise=0.6",
    "sft.epochs=10",
    "sft.lr=0.01",
    "sft.batch_size=16",
    "optim.lr=0.001",
    "optim.minibatch_size=8",
    "optim.micro_batch_size=3",  # several micro-batches per minibatch
    "threads=1",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "tiny.layers=2",
    "seed=1",
    "steps=1",
]

OPTIONS = {
    "algo.advantage": ["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "gae_turn"],
    "algo.truncation": ["mask", "zero"],
    "algo.std": ["population", "sample"],
    "algo.gigpo_norm": ["mean_std", "mean"],
    "algo.anchors": ["exact", "similar"],
    "algo.aggregation": ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"],
    "algo.ratio_level": ["token", "sequence"],
    "algo.is_correction": ["none", "tis", "decoupled"],
    "algo.is_level": ["token", "sequence"],
    "algo.is_mode": ["clamp", "mask"],
    "algo.kl_estimator": ["k1", "k3"],
    "max_staleness": [0, 1],
    "inflight": ["continue_new", "finish_old"],
    "optim.gradient_checkpointing": [True, False],
    "rollout.sampler": ["hf", "vllm"],
}
# options that only act together with another one
NEEDS = {
    # the guess expert never gives up: every episode that is not cut succeeds, so with cut
    # episodes masked the rewards left are all 1; the entropy term still trains
    "algo.truncation": ["algo.entropy_coef=0.01"],
    "algo.gigpo_norm": ["algo.advantage=gigpo"],
    "algo.anchors": ["algo.advantage=gigpo"],
    "algo.is_level": ["algo.is_correction=tis", "max_staleness=1"],
    "algo.is_mode": ["algo.is_correction=tis", "algo.is_cap=1.01", "max_staleness=1"],
    "algo.kl_estimator": ["algo.kl_coef=0.1"],
    "inflight": ["max_staleness=1"],
}
CASES = [[f"{key}={v}", *NEEDS.get(key, [])] for key, values in OPTIONS.items() for v in values]
CASES += [
    ["algo.advantage=gae_turn", "algo.truncation=bootstrap", "algo.value_clip=0.2"],
    ["algo.advantage=gae_turn", "algo.truncation=mask"],
    ["algo.entropy_coef=0.01"],
    ["algo.dual_clip=3.0"],
    ["algo.norm_tokens=64", "algo.aggregation=seq-mean-token-sum-norm"],
    ["optim.micro_batch_tokens=100"],
    ["optim.epochs=2", "optim.minibatch_size=4"],
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("turnrl-cache")


def one_step(tmp_path: Path, cache: Path, extra: list[str], monkeypatch) -> tuple[dict, Path]:
    monkeypatch.setenv("TURNRL_CACHE", str(cache))
    cfg = load_config(None, TINY + [f"runs_dir={tmp_path}"] + extra)
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if "loss" in r), run_dir


def weights_moved(run_dir: Path) -> bool:
    start = LlamaForCausalLM.from_pretrained(run_dir / "warm_start").state_dict()
    trained = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["model"]
    assert all(torch.isfinite(v).all() for v in trained.values())
    return any(not torch.equal(start[k], v) for k, v in trained.items())


@pytest.mark.parametrize("extra", CASES, ids=[" ".join(c) for c in CASES])
def test_one_training_step_per_option(tmp_path, cache, extra, monkeypatch):
    if "rollout.sampler=vllm" in extra and not vllm_available():
        pytest.skip(VLLM_NEEDS)
    row, run_dir = one_step(tmp_path, cache, extra, monkeypatch)
    assert math.isfinite(row["loss"]), row
    assert row["train/rows"] > 0 and row["train/skipped_steps"] == 0, row
    assert weights_moved(run_dir), f"{extra}: the step changed no weight"


def test_gae_turn_critic_is_checkpointed_and_resumed(tmp_path, cache, monkeypatch):
    extra = ["algo.advantage=gae_turn", "algo.truncation=bootstrap"]
    _, run_dir = one_step(tmp_path, cache, extra, monkeypatch)
    ckpt = run_dir / "checkpoints" / "last.pt"
    saved = torch.load(ckpt, weights_only=False)
    head = saved["critic"]["value_head.weight"]
    assert head.abs().sum() > 0  # trained from its zero init
    model = LlamaForCausalLM.from_pretrained(run_dir / "model")
    # the value head's Adam moments sit in the optimizer state beside the policy's
    assert len(saved["optimizer"]["state"]) == len(list(model.parameters())) + 2
    logs: list[str] = []
    cfg = load_config(None, TINY + [f"runs_dir={tmp_path}", "steps=2"] + extra)
    train(cfg, resume_dir=run_dir, quiet=True, log=logs.append)
    assert any("resumed" in line for line in logs)
    again = torch.load(ckpt, weights_only=False)
    assert again["step"] == 2 and not torch.equal(again["critic"]["value_head.weight"], head)


def test_critic_options_without_a_critic_are_refused():
    from turnrl.run.config import ConfigError

    with pytest.raises(ConfigError, match="value_clip: needs a critic, set advantage=gae_turn"):
        load_config(None, ["algo.value_clip=0.2"])
    assert load_config(None, ["algo.value_clip=0.2", "algo.advantage=gae_turn"]).algo.value_clip


def test_vllm_backend_config():
    """vLLM samples with other kernels than the trainer: truncated importance sampling is on
    unless chosen otherwise; only synchronous local runs push weights to it."""
    assert (
        load_config(
            None, ["model.name=tiny", "env.name=guess", "rollout.sampler=vllm"]
        ).algo.is_correction
        == "tis"
    )
    chosen = [
        "model.name=tiny",
        "env.name=guess",
        "rollout.sampler=vllm",
        "algo.is_correction=none",
    ]
    assert load_config(None, chosen).algo.is_correction == "none"
    with pytest.raises(ConfigError, match="rollout.sampler=vllm: only with rollout.workers=local"):
        load_config(
            None, ["model.name=tiny", "env.name=guess", "rollout.sampler=vllm", "max_staleness=1"]
        )


def test_vllm_backend_without_a_gpu_is_one_line(tmp_path, monkeypatch):
    if vllm_available():
        pytest.skip("vLLM runs here; the refusal is for machines without it")
    from typer.testing import CliRunner

    from turnrl.cli import app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["train", "model.name=tiny", "env.name=guess", "rollout.sampler=vllm"]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"config error: rollout.sampler: {VLLM_NEEDS} (nothing was started)"
    ]
    assert not (tmp_path / "runs").exists()
