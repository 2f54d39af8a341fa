"""GPU check of the scale-out path: SmolLM2-135M trained by FSDP2 (float32 master weights, bf16
compute) on one GPU, sampled by vLLM, for 3 RL steps through the real ``turnrl train``.

FSDP2 without torchrun runs over a private one-process group; vLLM runs in the same process and
receives the trainer's full weights after every optimizer step. Checks: 3 steps with finite
losses and policy versions 1, 2, 3; vLLM's behaviour log-probabilities agree with the trainer's
at every step (the truncated-importance weight π_trainer/π_vLLM stays near 1, which it would
not if the weights pushed after each update had not arrived: the learning rate here moves the
policy far more than the bf16/fp32 kernel difference); GPU memory used; ``run_dir/model`` holds
the step-3 float32 policy, different from the starting one, loadable by plain transformers.

Before it, two more runs, each in its own process (one vLLM engine per process): LoRA pushed as
adapters with ``sync_every=2`` (4 steps: the engine starts from the frozen base with
``enable_lora``, samples steps 1 and 3 from the trainer's current adapter and steps 2 and 4 one
version behind, which ``vllm/staleness_max`` records as 0, 1, 0, 1; only the last adapter stays
on disk) and, where two GPUs are visible, the trainer on ``cuda:1`` beside vLLM on ``cuda:0``
with ``rollout.vllm_gpu_memory=0.8`` (2 steps).
Skips (exit 0) with a message where no CUDA device or no vLLM is available.

    .venv/bin/python scripts/gpu_scale_check.py [RUNS_DIR]
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from gpu_check import check, check_saved_policy, logged_steps  # the sibling script

OVERRIDES = [
    "name=gpu-scale-check",
    "model.name=smollm2",
    "model.device=cuda",
    "model.dtype=float32",  # master weights; FSDP2 computes in bf16
    "trainer.strategy=fsdp2",
    "trainer.mixed_precision=bf16",
    "rollout.sampler=vllm",  # algo.is_correction=tis by default with vLLM
    "sft.enabled=false",
    "env.name=guess",
    "env.options={low: 1, high: 8}",
    "env.eval_tasks=4",
    "eval_every=0",
    "steps=3",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=32",
    "rollout.max_context_tokens=1024",
    "rollout.top_p=1.0",  # vLLM's and the trainer's logprobs of the same distribution
    "algo.truncation=zero",
    "algo.entropy_coef=0.01",  # every row gets gradient, even if all rewards tie
    "optim.lr=1e-4",  # large steps: stale vLLM weights would show in the importance weights
    "optim.minibatch_size=8",
    "optim.micro_batch_size=4",
]


LORA_OVERRIDES = [
    *(o for o in OVERRIDES if not o.startswith(("name=", "steps=", "trainer.", "model.dtype"))),
    "name=gpu-lora-check",
    "steps=4",
    "model.dtype=bfloat16",
    "model.lora=true",
    "model.lora_rank=8",
    "optim.lr=2e-3",  # LoRA's adapters start at zero and need a larger step
    "sync_every=2",
    "rollout.vllm_gpu_memory=0.3",
]
APART_OVERRIDES = [
    *(o for o in OVERRIDES if not o.startswith(("name=", "steps=", "trainer.", "model.device"))),
    "name=gpu-apart-check",
    "steps=2",
    "model.device=cuda:1",
    "rollout.vllm_gpu_memory=0.8",
]


def train_in_subprocess(overrides: list[str], runs: Path) -> Path:
    """One ``turnrl train`` in a fresh process (its own vLLM engine, freed when it exits)."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "turnrl", "train", *overrides, f"runs_dir={runs}", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    name = next(o for o in overrides if o.startswith("name=")).partition("=")[2]
    print(f"gpu_scale_check: {name} took {time.monotonic() - t0:.0f}s", flush=True)
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    check(done.returncode == 0, f"{name}: turnrl train exited {done.returncode}")
    return runs / name


def lora_sync_check(runs: Path) -> None:
    run_dir = train_in_subprocess(LORA_OVERRIDES, runs)
    steps = logged_steps(run_dir, 4)
    lag = [r["vllm/staleness_max"] for r in steps]
    check(lag == [0, 1, 0, 1], f"LoRA, sync_every=2: sampled versions lag by {lag}")
    weights = [r.get("train/is_weight_mean", float("nan")) for r in steps]
    print(f"  LoRA importance weight π_trainer/π_vLLM per step: {[round(w, 4) for w in weights]}")
    check(all(map(math.isfinite, weights)), "LoRA: finite importance weights")
    check(
        all(abs(math.log(weights[i])) < 0.1 for i in (0, 2)),
        "LoRA: right after a push vLLM samples from the trainer's current adapter",
    )
    adapters = sorted(p.name for p in (run_dir / "vllm" / "adapters").iterdir())
    check(adapters == ["v4"], f"LoRA: only the last adapter kept on disk ({adapters})")
    check((run_dir / "vllm" / "base" / "config.json").exists(), "LoRA: the frozen base saved")


def apart_check(runs: Path) -> None:
    if torch.cuda.device_count() < 2:
        print("  [skipped] trainer on cuda:1 beside vLLM on cuda:0: one GPU visible")
        return
    logged_steps(train_in_subprocess(APART_OVERRIDES, runs), 2)


def main() -> None:
    if not torch.cuda.is_available():
        print(
            "gpu_scale_check: skipped, no CUDA device visible (torch.cuda.is_available() is False)"
        )
        return
    from turnrl.policy.vllm import vllm_available

    if not vllm_available():
        print("gpu_scale_check: skipped, vLLM is not installed (pip install 'turnrl[vllm]')")
        return
    from safetensors.torch import load_file

    from turnrl.cli import app
    from turnrl.policy.models import load_model

    runs = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-scale-"))
    print(f"gpu_scale_check: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    lora_sync_check(runs)
    apart_check(runs)
    t0 = time.monotonic()
    app(["train", *OVERRIDES, f"runs_dir={runs}", "--quiet"], standalone_mode=False)
    run_dir = runs / "gpu-scale-check"
    print(f"gpu_scale_check: turnrl train took {time.monotonic() - t0:.0f}s, run {run_dir}")

    steps = logged_steps(run_dir, 3)
    weights = [r.get("train/is_weight_mean", float("nan")) for r in steps]
    print(f"  importance weight π_trainer/π_vLLM per step: {[round(w, 4) for w in weights]}")
    check(
        all(abs(math.log(w)) < 0.1 for w in weights if math.isfinite(w))
        and all(map(math.isfinite, weights)),
        "vLLM samples from the trainer's current weights at every step",
    )
    print(f"  train seconds per step: {[round(r['time/train_s'], 2) for r in steps]}")
    print(f"  rollout seconds per step: {[round(r['time/rollout_s'], 2) for r in steps]}")
    peak = torch.cuda.max_memory_allocated() / 2**30
    check(peak > 0.2, f"GPU memory used: peak {peak:.2f} GiB")

    check_saved_policy(run_dir, torch.float32, 3)
    trained = load_file(str(run_dir / "model" / "model.safetensors"))
    start = load_model("smollm2", "float32", "cpu").state_dict()
    moved = any(
        not torch.equal(start[k].float(), v.float()) for k, v in trained.items() if k in start
    )
    check(moved, "the saved policy differs from the starting SmolLM2")
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    same = all(
        torch.equal(ckpt["model"][k].float(), trained[k].float())
        for k in trained
        if k in ckpt["model"]
    )
    check(same, "run_dir/model equals the checkpoint's full (gathered) weights")
    print("gpu_scale_check: all checks passed")


if __name__ == "__main__":
    main()
