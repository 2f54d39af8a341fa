"""The trainer: config errors, run-directory contents, learning on a learnable task, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from turnrl.run.config import ConfigError, load_config
from turnrl.run.preflight import checked_config
from turnrl.run.recipe import train

# A context-free bandit: every task hides 5 in [1, 8]; the noisy SFT start guesses at random
# half the time, so the first guess is right only sometimes. RL must make guess(5) the habit.
BANDIT = [
    "name=bandit",
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 8, secret: 5}",
    "env.eval_tasks=48",
    "eval_every=0",
    "rollout.tasks_per_step=4",
    "rollout.group_size=8",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=24",
    "rollout.max_context_tokens=512",
    "sft.enabled=true",
    "sft.episodes=128",
    "sft.noise=0.9",
    "sft.epochs=10",
    "sft.lr=0.01",
    "sft.batch_size=16",
    "optim.lr=0.001",
    "algo.truncation=zero",  # a missed guess is a failure here, not a cut episode
    "threads=1",
    "optim.minibatch_size=32",
    "optim.micro_batch_size=32",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "tiny.layers=2",
    "seed=1",
]


@pytest.fixture(scope="session")
def _shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("turnrl-cache")


@pytest.fixture(autouse=True)
def _cache(_shared_cache, monkeypatch):
    # One SFT warm start per configuration for the whole session, as a user's cache would be.
    monkeypatch.setenv("TURNRL_CACHE", str(_shared_cache))


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_config_errors_are_collected_and_name_fields():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["steps=-1", "rollout.group_size=abc", "algo.nope=1"])
    text = str(e.value)
    for field in ("steps", "rollout.group_size", "algo.nope"):
        assert field in text
    # what depends on the machine is checked at run start, also collected
    with pytest.raises(ConfigError) as e:
        checked_config(None, ["env.name=mars", "model.name=/nowhere/model"])
    assert "env.name: unknown env 'mars'" in str(e.value) and "model.name:" in str(e.value)
    with pytest.raises(ConfigError, match="truncation=bootstrap needs a critic"):
        load_config(None, ["algo.truncation=bootstrap"])
    with pytest.raises(ConfigError, match="unknown recipe 'nope'"):
        load_config(None, ["recipe=nope"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["steps"])


def test_config_file_recipe_and_overrides_merge(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(
        yaml.safe_dump({"recipe": "guess-tiny", "steps": 3, "algo": {"advantage": "rloo"}})
    )
    cfg = load_config(f, ["algo.eps_high=0.3"])
    assert cfg.env.name == "guess" and cfg.steps == 3
    assert cfg.algo.advantage == "rloo" and cfg.algo.eps_high == 0.3


def test_default_recipe_only_when_nothing_picks_the_model_or_the_env():
    """`turnrl train` (also with overrides that keep its model and env) runs code-tiny; an
    override that names the model or the env starts from the schema's defaults instead."""
    default = load_config(None, [])
    more_eval = load_config(None, ["env.eval_tasks=200", "steps=3"])
    assert more_eval.name == default.name == "code-tiny" and more_eval.env.eval_tasks == 200
    assert more_eval.sft == default.sft and more_eval.env.options == default.env.options
    assert default.sft.enabled and default.env.options == {"tiers": [0]}
    assert default.model.name == "tiny" and default.tiny is not None
    for picks in (["env.name=guess"], ["model.name=tiny"], ["model.name=smollm2"]):
        cfg = load_config(None, picks)
        assert cfg.name == "run" and not cfg.sft.enabled, picks
    assert load_config(None, ["env.name=guess"]).env.options == {}


def test_library_defaults_serve_a_pretrained_model():
    """The schema's model is smollm2: a config that picks only the env, a config file or a
    bare TrainConfig gets it (and no tiny section); the tiny model is asked for by name."""
    from turnrl.run.config import TinyConfig, TrainConfig

    assert TrainConfig().model.name == "smollm2" and TrainConfig().tiny is None
    picked_env = load_config(None, ["env.name=guess"])
    assert picked_env.model.name == "smollm2" and picked_env.tiny is None
    assert load_config(None, ["model.name=tiny"]).tiny == TinyConfig()


def test_real_model_config_has_sft_off_and_no_tiny_settings():
    """A pretrained model gets the library defaults: no SFT, a fine-tuning learning rate, the
    env's own default tasks (code tiers 1-3), and none of the tiny model's settings."""
    from turnrl.envs.registry import make_family
    from turnrl.run.config import TinyConfig

    cfg = load_config(None, ["model.name=smollm2", "model.lora=true"])
    assert cfg.name == "run" and cfg.model.name == "smollm2"
    assert not cfg.sft.enabled and cfg.sft.lr <= 1e-4 and cfg.optim.lr <= 1e-4
    assert cfg.tiny is None and cfg.env.options == {}
    assert make_family(cfg.env.name, cfg.env.options).tiers == (1, 2, 3)
    dumped = cfg.model_dump()
    for key in TinyConfig.model_fields:  # the tiny-only keys live in the tiny section alone
        assert key not in dumped["model"] and key not in dumped["sft"], key
    # the tiny section is the tiny model's: asking for it with another model is an error
    with pytest.raises(ConfigError, match="tiny: settings of the tiny model"):
        load_config(None, ["model.name=smollm2", "tiny.layers=2"])
    with pytest.raises(ConfigError, match="tiny: settings of the tiny model"):
        load_config(None, ["env.name=guess", "tiny.layers=2"])


def test_bad_env_option_fails_before_work(tmp_path):
    from turnrl.run.config import TrainConfig

    cfg = load_config(
        None, BANDIT + [f"runs_dir={tmp_path}", "env.options={low: 1, high: 8, colour: red}"]
    )
    assert isinstance(cfg, TrainConfig)
    with pytest.raises(ValueError, match="env.options"):
        train(cfg, quiet=True, log=lambda s: None)
    assert not (tmp_path / "bandit" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_training_moves_policy_towards_reward_and_writes_run_dir(tmp_path):
    cfg = load_config(None, BANDIT + [f"runs_dir={tmp_path}", "steps=15"])
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    rows = metrics(run_dir)
    evals = [r for r in rows if "eval/success" in r]
    before, after = evals[0]["eval/success"], evals[-1]["eval/success"]
    assert after >= before + 0.2, (before, after)
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 15
    assert steps[-1]["reward/mean"] > steps[0]["reward/mean"]
    required = [
        "step",
        "reward/mean",
        "success/true",
        "success/proxy",
        "hack_rate",
        "truncation_rate",
        "episode/turns_mean",
        "episode/tokens_mean",
        "loss",
        "kl",
        "entropy",
        "time/rollout_s",
        "time/train_s",
    ]
    for key in required:
        assert key in steps[-1], key
    assert (run_dir / "config.yaml").exists()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "last.pt").exists()
    report = (run_dir / "report.html").read_text()
    assert 'id="turnrl-runs"' in report and 'id="turnrl-step-0-15"' in report  # the export
    # The SFT warm start is cached: a second run does not repeat it.
    logs: list[str] = []
    cfg2 = load_config(None, BANDIT + [f"runs_dir={tmp_path}", "steps=0", "name=again"])
    train(cfg2, quiet=True, log=logs.append)
    assert any("cached SFT model" in line for line in logs)


def test_rubric_decides_training_and_eval_rewards(tmp_path):
    """The run's rubric (reward.*) decides the reward of every rollout and held-out episode:
    here the env's grade plus a constant bonus of 0.25 from a function named by import path."""
    cfg = load_config(
        None,
        BANDIT
        + [
            f"runs_dir={tmp_path}",
            "steps=1",
            "name=rubric",
            "env.eval_tasks=8",
            "reward.functions={tests.test_rewards:bonus: 1.0}",
        ],
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    rows = metrics(run_dir)
    (step,) = [r for r in rows if "reward/mean" in r]
    assert step["rubric/bonus"] == 0.25 and step["reward/excluded_rate"] == 0.0
    assert step["reward/mean"] == pytest.approx(step["success/true"] + 0.25)
    assert "screen/flagged_rate" in step and "rubric/env_reward" in step
    evals = [r for r in rows if "eval/reward" in r]
    assert len(evals) == 2
    for r in evals:
        assert r["eval/reward"] == pytest.approx(r["eval/success"] + 0.25)


def _comparable(row: dict) -> dict:
    """Without timings and the run's own bookkeeping (resume count, tool threads)."""
    return {k: v for k, v in row.items() if not k.startswith(("time/", "run/", "env/"))}


@pytest.mark.slow
def test_resume_after_sigkill_matches_uninterrupted_run(tmp_path):
    # batches that always gather every live episode: the same batches in both runs (faults.md)
    args = BANDIT + ["steps=4", "checkpoint_every=1", "rollout.batch_wait_s=60"]
    straight = train(
        load_config(None, args + [f"runs_dir={tmp_path / 'a'}"]), quiet=True, log=lambda s: None
    )

    # The same run in a subprocess, killed with SIGKILL once step 2 is checkpointed.
    runs = tmp_path / "b"
    cmd = [sys.executable, "-m", "turnrl.cli", "train", "--quiet", *args, f"runs_dir={runs}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mfile = runs / "bandit" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (
            mfile.exists()
            and sum(1 for ln in mfile.read_text().splitlines() if '"reward/mean"' in ln) >= 2
        ):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = train(
        load_config(runs / "bandit" / "config.yaml"),
        resume_dir=runs / "bandit",
        quiet=True,
        log=lambda s: None,
    )
    a = [_comparable(r) for r in metrics(straight)]
    b = [_comparable(r) for r in metrics(resumed)]
    assert a == b


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        ["max_staleness=1", "algo.is_correction=tis"],
        ["max_staleness=2", "sync_every=2", "algo.is_correction=decoupled"],
        pytest.param(["rollout.workers=ray", "ray.num_workers=2"], id="ray"),
    ],
)
def test_async_and_ray_workers_train(tmp_path, extra):
    if "rollout.workers=ray" in extra:
        pytest.importorskip("ray", reason="the ray extra is not installed")
    cfg = load_config(
        None,
        BANDIT + [f"runs_dir={tmp_path}", "steps=3"] + extra,
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    steps = [r for r in metrics(run_dir) if "reward/mean" in r]
    assert [r["policy_version"] for r in steps] == [1, 2, 3]
    if cfg.rollout.workers == "local":
        assert all(r["async/staleness_max"] <= cfg.max_staleness for r in steps)
        assert any("train/is_weight_mean" in r for r in steps)
    else:
        assert steps[-1]["ray/workers_alive"] == 2


@pytest.mark.slow
def test_smollm2_with_lora_trains_two_steps(tmp_path):
    pytest.importorskip("gguf", reason="SmolLM2 needs the gguf package (dev extra)")
    pytest.importorskip("peft", reason="LoRA needs peft (dev extra)")
    cfg = load_config(
        None,
        [
            "name=smol",
            f"runs_dir={tmp_path}",
            "model.name=smollm2",
            "model.lora=true",
            "env.name=guess",
            "env.options={low: 1, high: 8}",
            "env.eval_tasks=2",
            "eval_every=0",
            "steps=2",
            "rollout.tasks_per_step=2",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=24",
            "rollout.max_context_tokens=1024",
            "algo.truncation=zero",
            "optim.minibatch_size=4",
            "optim.micro_batch_size=2",
        ],
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    steps = [r for r in metrics(run_dir) if "reward/mean" in r]
    assert len(steps) == 2
    import torch

    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["model"] and all("lora_" in k for k in state["model"])  # only adapters are saved


def test_tiny_tokenizer_writes_a_tool_call_frame_in_few_tokens():
    from turnrl.chat import HermesToolCallParser
    from turnrl.tiny.model import train_tokenizer
    from turnrl.types import ToolCall

    parser = HermesToolCallParser()
    calls = [ToolCall("run_tests", {}), ToolCall("read_file", {"path": "area.py"})]
    tok = train_tokenizer(
        [parser.format([c]) for c in calls] * 20, vocab_size=400, extra_tokens=["run_tests"]
    )
    text = parser.format([calls[0]])
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == 4 and tok.decode(ids) == text  # frame, name, frame, frame
    assert parser.parse(tok.decode(tok.encode(parser.format([calls[1]])))) == [calls[1]]


def test_evaluation_samples_like_rollouts_unless_told_otherwise():
    from types import SimpleNamespace

    from turnrl.run.build import sampling_of as _sampling

    renderer = SimpleNamespace(turn_end_id=7)
    cfg = load_config(overrides=["rollout.temperature=0.8"])
    assert _sampling(cfg, renderer).temperature == 0.8  # rollouts explore
    assert _sampling(cfg, renderer, evaluation=True).temperature == 0.8  # the trained policy
    cfg = load_config(overrides=["rollout.eval_temperature=0"])  # greedy
    assert _sampling(cfg, renderer, evaluation=True).temperature == 0.0
    assert _sampling(cfg, renderer).temperature == 1.0
    with pytest.raises(ConfigError, match="eval_temperature"):
        load_config(overrides=["rollout.eval_temperature=-1"])


def test_earlier_keys_for_where_work_runs_are_refused_naming_their_successors(tmp_path):
    """On the command line and in a config file each key of an earlier version is one line
    naming what replaced it; nothing is started. (A run's own saved config.yaml is translated
    instead: tests/test_export.py evaluates and exports such a run.)"""
    from typer.testing import CliRunner

    from turnrl.cli import app

    runner = CliRunner()
    args = ["mode=async", "rollout.backend=hf", "distributed.backend=ray"]
    out = runner.invoke(app, ["train", *args, "distributed.num_workers=4", f"runs_dir={tmp_path}"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "config error (nothing was started):",
        "  mode: removed; asynchronous rollouts are max_staleness=N (N >= 1; 0 is synchronous)",
        "  rollout.backend: renamed rollout.sampler (hf or vllm)",
        "  distributed.backend: renamed rollout.workers (local or ray)",
        "  distributed.num_workers: renamed ray.num_workers",
    ]
    f = tmp_path / "old.yaml"
    f.write_text(yaml.safe_dump({"mode": "sync", "rollout": {"group_size": 4}}))
    with pytest.raises(ConfigError, match=r"^mode: removed; asynchronous rollouts are "):
        load_config(f)
    with pytest.raises(ConfigError) as e:  # per-turn shaping is the rubric's
        load_config(None, ["env.name=tools", "env.options={progress_reward: true}"])
    assert str(e.value) == (
        "env.options.progress_reward: moved to the rubric: reward.shaping={progress: 1.0}"
    )
    # ... and translated in a run's saved config (what turnrl eval/export/--resume read)
    from turnrl.run.config import TrainConfig, upgrade_saved

    saved = load_config(None, ["env.name=tools"]).model_dump()
    saved["env"]["options"]["progress_reward"] = True
    upgraded = TrainConfig.model_validate(upgrade_saved(saved))
    assert upgraded.reward.shaping == {"progress": 1.0} and upgraded.env.options == {}
    assert not list(tmp_path.glob("run*"))


def test_where_work_runs_options_act_only_where_they_apply():
    """One key per part of where work runs; an option set where it does nothing is refused,
    all at once."""
    with pytest.raises(ConfigError) as e:
        load_config(None, ["inflight=finish_old", "ray.num_workers=4", "sync_every=3"])
    assert str(e.value).splitlines() == [
        "sync_every=3 must be <= max_staleness + 1 = 1 (older weights would exceed the bound)",
        "inflight: only with asynchronous local rollouts (max_staleness >= 1)",
        "ray.num_workers: only with rollout.workers=ray",
    ]
    cfg = load_config(None, ["rollout.workers=ray", "ray.num_workers=4", "max_staleness=2"])
    assert (cfg.rollout.workers, cfg.ray.num_workers, cfg.max_staleness) == ("ray", 4, 2)
    with pytest.raises(ConfigError, match="subagent.enabled: only with rollout.workers=local"):
        load_config(None, ["recipe=locker-tiny", "rollout.workers=ray"])
