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


def main() -> None:
    if not torch.cuda.is_available():
        print("gpu_check: skipped, no CUDA device visible (torch.cuda.is_available() is False)")
        return
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from turnrl.cli import app
    from turnrl.train.metrics import read_jsonl

    runs = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    print(f"gpu_check: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    t0 = time.monotonic()
    app(["train", *OVERRIDES, f"runs_dir={runs}", "--quiet"], standalone_mode=False)
    run_dir = runs / "gpu-check"
    print(f"gpu_check: turnrl train took {time.monotonic() - t0:.0f}s, run {run_dir}")

    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "policy_version" in r]
    check(len(steps) == 3, f"3 training steps logged (got {len(steps)})")
    check([r["policy_version"] for r in steps] == [1, 2, 3], "policy version 1, 2, 3")
    check(
        all(math.isfinite(r["loss"]) for r in steps), f"finite losses {[r['loss'] for r in steps]}"
    )
    print(f"  train seconds per step: {[round(r['time/train_s'], 2) for r in steps]}")
    print(f"  rollout seconds per step: {[round(r['time/rollout_s'], 2) for r in steps]}")
    peak = torch.cuda.max_memory_allocated() / 2**30
    check(peak > 0.2, f"GPU memory used: peak {peak:.2f} GiB")

    record = json.loads((run_dir / "model" / "turnrl.json").read_text())
    check(record["dtype"] == "bfloat16", f"saved policy dtype {record['dtype']}")
    check(record["step"] == 3, f"saved policy is step {record['step']}")
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model", dtype=torch.bfloat16).cuda()
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    ids = torch.tensor([tok("Find the hidden number.")["input_ids"]], device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    check(bool(torch.isfinite(logits).all()), "run_dir/model loads in transformers, finite logits")
    print("gpu_check: all checks passed")


if __name__ == "__main__":
    main()
