"""GPU check: SmolLM2-135M in bf16 on CUDA, 3 RL steps through the real ``turnrl train``.

Checks that the model is placed on the GPU in bfloat16, that 3 training steps run with finite
losses and a moving policy version, that GPU memory was used, and that ``run_dir/model`` holds
the trained bf16 policy, loadable by plain transformers, with finite logits on the GPU.
Skips (exit 0) with a message where no CUDA device is visible.

    .venv/bin/python scripts/gpu_check.py [RUNS_DIR]
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

OVERRIDES = [
    "name=gpu-check",
    "model.name=smollm2",
    "model.device=cuda",
    "model.dtype=bfloat16",
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
    "algo.truncation=zero",
    "algo.entropy_coef=0.001",  # every row gets gradient, even if all rewards tie
    "optim.minibatch_size=8",
    "optim.micro_batch_size=4",
]


def check(ok: bool, what: str) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}", flush=True)
    if not ok:
        sys.exit(1)


def logged_steps(run_dir: Path, n: int) -> list[dict]:
    """The run's step rows, checked: ``n`` of them, policy versions 1..n, finite losses."""
    from turnrl.train.metrics import read_jsonl

    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "policy_version" in r]
    check(len(steps) == n, f"{n} training steps logged (got {len(steps)})")
    versions = list(range(1, n + 1))
    check([r["policy_version"] for r in steps] == versions, f"policy versions {versions}")
    check(
        all(math.isfinite(r["loss"]) for r in steps), f"finite losses {[r['loss'] for r in steps]}"
    )
    return steps


def check_saved_policy(run_dir: Path, dtype: torch.dtype, step: int):
    """``run_dir/model`` is the step-``step`` policy in ``dtype``, loads in plain transformers
    on the GPU and gives finite logits; returns the loaded model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    record = json.loads((run_dir / "model" / "turnrl.json").read_text())
    name = str(dtype).removeprefix("torch.")
    check(record["dtype"] == name, f"saved policy dtype {record['dtype']}")
    check(record["step"] == step, f"saved policy is step {record['step']}")
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model", dtype=dtype).cuda()
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    ids = torch.tensor([tok("Find the hidden number.")["input_ids"]], device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    check(bool(torch.isfinite(logits).all()), "run_dir/model loads in transformers, finite logits")
    return model


def main() -> None:
    if not torch.cuda.is_available():
        print("gpu_check: skipped, no CUDA device visible (torch.cuda.is_available() is False)")
        return
    from turnrl.cli import app

    runs = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    print(f"gpu_check: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    t0 = time.monotonic()
    app(["train", *OVERRIDES, f"runs_dir={runs}", "--quiet"], standalone_mode=False)
    run_dir = runs / "gpu-check"
    print(f"gpu_check: turnrl train took {time.monotonic() - t0:.0f}s, run {run_dir}")

    steps = logged_steps(run_dir, 3)
    print(f"  train seconds per step: {[round(r['time/train_s'], 2) for r in steps]}")
    print(f"  rollout seconds per step: {[round(r['time/rollout_s'], 2) for r in steps]}")
    peak = torch.cuda.max_memory_allocated() / 2**30
    check(peak > 0.2, f"GPU memory used: peak {peak:.2f} GiB")
    check_saved_policy(run_dir, torch.bfloat16, 3)
    print("gpu_check: all checks passed")


if __name__ == "__main__":
    main()
