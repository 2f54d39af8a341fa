"""SFT and the tiny warm start under interruption: progress lines with an ETA, checkpoints, a
Ctrl-C'd `turnrl train` that exits 130 and resumes where SFT stopped to the very same model as
an uninterrupted run, a cache that never holds a half-trained model, and `turnrl eval` of a
missing run or an unreachable hub model failing in one line at once."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import turnrl.tiny.induction as induction
import turnrl.train.metrics as metrics
import turnrl.train.sft as sft
from turnrl.cli import app
from turnrl.run.config import load_config
from turnrl.run.recipe import train
from turnrl.train.metrics import PhaseProgress, read_jsonl

runner = CliRunner()

# A guess run at smoke-test size whose SFT is 16 epochs x 8 batches = 128 steps (a few seconds).
SMALL = [
    "name=fast",
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 8, secret: 5}",
    "env.eval_tasks=4",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=24",
    "rollout.max_context_tokens=512",
    "sft.enabled=true",
    "sft.episodes=128",
    "sft.noise=0.5",
    "sft.epochs=16",
    "sft.lr=0.01",
    "sft.batch_size=16",
    "threads=1",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "tiny.layers=2",
    "seed=1",
    "steps=1",
]
SFT_STEPS = 128


def run(args: list[str], resume: Path | None = None, logs: list | None = None) -> Path:
    cfg = load_config(resume / "config.yaml" if resume else None, args)
    return train(
        cfg, resume_dir=resume, quiet=True, log=logs.append if logs is not None else lambda s: None
    )


def weights(run_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The run's warm start and its trained policy."""
    return {
        part: load_file(run_dir / part / "model.safetensors") for part in ("warm_start", "model")
    }


def assert_same(got: dict, want: dict) -> None:
    for part in want:
        assert got[part].keys() == want[part].keys()
        for k, v in want[part].items():
            assert torch.allclose(got[part][k], v, atol=1e-6, rtol=0), (part, k)


def cache_entries(cache: Path) -> dict[str, bool]:
    """Each folder of the cache and whether it holds a model (a config.json)."""
    return {p.name: (p / "config.json").exists() for p in cache.iterdir()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The uninterrupted run from an empty cache: what every interrupted one must end as."""
    tmp = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TURNRL_CACHE", str(tmp / "cache"))
        return weights(run(SMALL + [f"runs_dir={tmp}", "name=ref"]))


def test_phase_progress_lines_are_spaced_and_carry_an_eta(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: now[0])
    lines: list[str] = []
    progress = PhaseProgress("sft step", 100, lines.append)
    for step in range(21, 101):  # resumed at step 20: a slow first step, then 0.25 s each
        now[0] += 6.0 if step == 21 else 0.25
        progress.update(step, f"loss {step / 100:.2f}")
    # the first line once a second update came, then one per 5 s, and the last; the ETA is
    # 0.25 s x the steps left (the first step's 6 s are not taken for the rate)
    assert lines == [
        "  sft step 22/100  loss 0.22  elapsed 6s  ETA 20s",
        "  sft step 42/100  loss 0.42  elapsed 11s  ETA 15s",
        "  sft step 62/100  loss 0.62  elapsed 16s  ETA 10s",
        "  sft step 82/100  loss 0.82  elapsed 21s  ETA 5s",
        "  sft step 100/100  loss 1.00  elapsed 26s  ETA 0s",
    ]
    lines.clear()
    quick = PhaseProgress("episode", 50, lines.append)
    for done in range(1, 51):  # all in half a second: the caller's own lines say enough
        now[0] += 0.01
        quick.update(done)
    assert lines == []
    bounded = PhaseProgress("induction step", 3000, lines.append, upper_bound=True)
    bounded.update(1)
    now[0] += 90.0
    bounded.update(1501)
    assert lines == ["  induction step 1501/3000  elapsed 1m30s  ETA at most 1m30s"]
    assert metrics.clock(3725) == "1h02m" and metrics.clock(65) == "1m05s"


def test_ctrl_c_during_sft_exits_130_and_resume_continues_it(tmp_path, monkeypatch, reference):
    """A real `turnrl train` process, SIGINT'd at its first SFT progress line: exit 130 with
    the resume command; the cache holds only the unfinished work; `--resume` continues SFT from
    its checkpoint (not step 0), then RL, and ends with the uninterrupted run's exact model."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TURNRL_CACHE", str(cache))
    run_dir = tmp_path / "fast"
    cmd = [sys.executable, "-m", "turnrl.cli", "train", "--quiet", *SMALL, f"runs_dir={tmp_path}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line.rstrip("\n"))
        if line.startswith("  sft step"):
            proc.send_signal(signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=120)
    out += rest.splitlines()
    assert proc.returncode == 130, (out, err)

    announce = f"16 epochs of 8 batches of 16 = {SFT_STEPS} steps"
    assert any(line.endswith(announce) for line in out), out
    progress = next(line for line in out if line.startswith("  sft step"))
    pattern = r"  sft step (\d+)/128  \(epoch \d+/16\)  loss [\d.]+  elapsed \d+s  ETA \d+s"
    assert re.fullmatch(pattern, progress), progress
    last = err.splitlines()[-3:]
    assert last[0] == "interrupted" and last[2] == (
        f"continue with: turnrl train --resume {run_dir}"
    ), err
    stopped = re.fullmatch(r"SFT stopped after step (\d+) of 128; its checkpoint is saved", last[1])
    assert stopped, err
    k = int(stopped[1])
    assert 0 < k < SFT_STEPS

    # the cache holds the unfinished work only, never a model
    [(name, has_model)] = cache_entries(cache).items()
    assert name.endswith(".partial") and not has_model
    assert torch.load(cache / name / "sft.pt", weights_only=False)["step"] == k

    result = runner.invoke(app, ["train", "--quiet", "--resume", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert f"  sft: continuing from its checkpoint at step {k}/{SFT_STEPS}" in result.stdout
    assert "playing" not in result.stdout  # the demonstrations came from the checkpoint's work
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r] == [1]
    assert_same(weights(run_dir), reference)
    [(name, has_model)] = cache_entries(cache).items()  # complete, and the work is gone
    assert not name.endswith(".partial") and has_model


def test_a_crash_mid_sft_keeps_its_checkpoint_and_a_new_run_continues_it(
    tmp_path, monkeypatch, reference
):
    """A crash (not Ctrl-C) keeps the last periodic checkpoint; a fresh `train` with the same
    settings continues the unfinished warm start from it and ends as the uninterrupted run."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TURNRL_CACHE", str(cache))
    monkeypatch.setattr(sft, "CHECKPOINT_EVERY_S", 0.0)  # as often as saving allows
    real, calls = sft.demo_logprobs, []

    def crash(*a, **kw):
        calls.append(1)
        if len(calls) == 20:
            raise RuntimeError("power cut")
        return real(*a, **kw)

    monkeypatch.setattr(sft, "demo_logprobs", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        run(SMALL + [f"runs_dir={tmp_path}", "name=first"])
    monkeypatch.setattr(sft, "demo_logprobs", real)
    [(name, has_model)] = cache_entries(cache).items()
    assert name.endswith(".partial") and not has_model
    k = torch.load(cache / name / "sft.pt", weights_only=False)["step"]
    assert 0 < k < 20

    logs: list[str] = []
    second = run(SMALL + [f"runs_dir={tmp_path}", "name=second"], logs=logs)
    assert any(line.startswith("warm start: continuing the unfinished one in") for line in logs)
    assert f"  sft: continuing from its checkpoint at step {k}/{SFT_STEPS}" in logs
    assert_same(weights(second), reference)
    assert cache_entries(cache) == {name.removesuffix(".partial"): True}


def test_induction_warmup_stopped_by_ctrl_c_resumes_exactly(tmp_path, monkeypatch):
    from tests.test_induction import small_model

    want = small_model()
    induction.induction_warmup(want, max_steps=60, seed=0)

    real, calls = induction.copy_loss, []

    def ctrl_c_at_30(*a, **kw):
        calls.append(1)
        if len(calls) == 30:
            signal.raise_signal(signal.SIGINT)  # as a user's Ctrl-C: the step still finishes
        return real(*a, **kw)

    monkeypatch.setattr(induction, "copy_loss", ctrl_c_at_30)
    ckpt = tmp_path / "induction.pt"
    handler = signal.getsignal(signal.SIGINT)  # SIG_IGN under nohup or a background job
    with pytest.raises(KeyboardInterrupt) as stop:
        induction.induction_warmup(small_model(), max_steps=60, seed=0, checkpoint=ckpt)
    assert stop.value.__notes__ == [
        "the induction warm-up stopped after step 30; its checkpoint is saved"
    ]
    assert signal.getsignal(signal.SIGINT) is handler  # restored
    monkeypatch.setattr(induction, "copy_loss", real)
    got, lines = small_model(), []
    _, steps = induction.induction_warmup(
        got, max_steps=60, seed=0, checkpoint=ckpt, log=lines.append
    )
    assert steps == 60 and lines[0] == "  induction: continuing from its checkpoint at step 30/60"
    for (name, a), b in zip(got.state_dict().items(), want.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), name


def test_pretrained_model_sft_resumes_in_the_run_and_is_not_trained_twice(tmp_path, monkeypatch):
    """A real model's SFT keeps its work in run_dir/sft: `--resume` after a crash continues it,
    and a resume after it finished loads it instead of training again."""
    from tests.chat_families import llama3, random_model

    tok = llama3()
    model_dir = tmp_path / "model"
    random_model(tok, "llama3").save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    args = [
        "name=real",
        f"model.name={model_dir}",
        "env.name=guess",
        "env.options={low: 1, high: 8, secret: 5}",
        "env.eval_tasks=2",
        "rollout.tasks_per_step=2",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "rollout.max_context_tokens=1024",
        "sft.enabled=true",
        "sft.episodes=16",
        "sft.epochs=2",
        "sft.batch_size=4",
        "threads=1",
        "steps=1",
        f"runs_dir={tmp_path / 'runs'}",
    ]
    monkeypatch.setattr(sft, "CHECKPOINT_EVERY_S", 0.0)
    real, calls = sft.demo_logprobs, []

    def crash(*a, **kw):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("power cut")
        return real(*a, **kw)

    monkeypatch.setattr(sft, "demo_logprobs", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        run(args)
    monkeypatch.setattr(sft, "demo_logprobs", real)
    run_dir = tmp_path / "runs" / "real"
    k = torch.load(run_dir / "sft" / "sft.pt", weights_only=False)["step"]
    assert 0 < k < 5 and (run_dir / "sft" / "episodes.pkl").exists()

    logs: list[str] = []
    run([], resume=run_dir, logs=logs)
    assert f"  sft: continuing from its checkpoint at step {k}/8" in logs
    assert not any("playing" in line for line in logs)
    logs.clear()
    run(["steps=2"], resume=run_dir, logs=logs)
    assert f"  sft: done already ({run_dir / 'sft' / 'sft.pt'})" in logs
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r] == [1, 2]


# -- turnrl eval of a run or model that is not there --------------------------------------


@pytest.mark.parametrize("runs_folder", [False, True])
def test_eval_of_a_missing_run_fails_in_one_line_at_once(tmp_path, monkeypatch, runs_folder):
    monkeypatch.chdir(tmp_path)
    if runs_folder:
        (tmp_path / "runs").mkdir()
    t0 = time.monotonic()
    result = runner.invoke(app, ["eval", "runs/nope"])
    assert result.exit_code == 2
    assert result.stderr == (
        "eval: runs/nope is neither a run directory (no runs/nope/config.yaml) nor a model "
        "directory; give a run directory such as runs/NAME, a model directory, tiny or smollm2\n"
    )
    assert time.monotonic() - t0 < 15  # no hub retries (they took about 50 s)


def test_eval_of_a_hub_model_not_available_offline_fails_in_one_line_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    result = runner.invoke(app, ["eval", "someorg/somemodel"])
    assert result.exit_code == 2
    assert result.stderr == (
        "eval: someorg/somemodel is not in the local Hugging Face cache and the hub cannot be "
        "reached (offline); download it while online, or give a local directory with "
        "config.json\n"
    )
    assert time.monotonic() - t0 < 15
    assert not (tmp_path / "runs").exists()
