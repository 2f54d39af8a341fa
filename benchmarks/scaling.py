"""RL steps per second with 1 and 2 trainer processes (torchrun, data-parallel), and the ratio.

Each run is the real CLI, ``torchrun --nproc_per_node N -m turnrl train``, on the same config:
the guess bandit (one turn) with a tiny model, ``--tasks`` task groups of ``--group`` episodes
per step. With N processes each rank rolls out 1/N of the groups and trains on 1/N of every
minibatch's rows (``turnrl.train.parallel``), so the ideal ratio is N where N free cores or
GPUs exist. A step's time is the loop's own ``time/rollout_s + time/train_s`` (rank 0's), the
first step left out as warm-up; process start, the warm start and evaluation are not counted.

CPU (gloo, ``--threads`` torch threads per process split between the processes):

    .venv/bin/python benchmarks/scaling.py [--steps 6] [--strategy ddp]

GPU (NCCL, one GPU per process; needs 2 GPUs for the second row):

    .venv/bin/python benchmarks/scaling.py --device cuda --strategy fsdp2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def config(args: argparse.Namespace, nproc: int, runs: Path) -> list[str]:
    threads = max(1, args.threads // nproc) if args.device == "cpu" else 1
    return [
        f"runs_dir={runs}",
        f"name=n{nproc}",
        f"steps={args.steps + 1}",
        "model.name=tiny",
        "env.name=guess",
        "env.options={low: 1, high: 8, secret: 5}",
        "env.eval_tasks=2",
        f"rollout.tasks_per_step={args.tasks}",
        f"rollout.group_size={args.group}",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=24",
        "rollout.max_context_tokens=512",
        "sft.enabled=true",
        "sft.episodes=64",
        "sft.noise=0.9",
        "sft.epochs=2",
        "sft.lr=0.003",
        "algo.truncation=zero",
        "algo.entropy_coef=0.001",  # every row is trained: a step's training work is fixed
        "optim.lr=0.001",
        f"optim.minibatch_size={args.tasks * args.group}",
        "optim.micro_batch_size=8",
        f"tiny.hidden_size={args.hidden}",
        f"tiny.layers={args.layers}",
        f"threads={threads}",
        f"model.device={args.device}",
        f"trainer.strategy={args.strategy}",
    ]


def run(args: argparse.Namespace, nproc: int, runs: Path) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)]
    cmd += ["-m", "turnrl", "train", "--quiet", *config(args, nproc, runs)]
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit(f"{nproc} process(es) failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    rows = [
        json.loads(ln) for ln in (runs / f"n{nproc}" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r for r in rows if "time/train_s" in r][1:]  # the first step warms up
    rollout = sum(r["time/rollout_s"] for r in steps) / len(steps)
    train = sum(r["time/train_s"] for r in steps) / len(steps)
    return {
        "steps/s": 1 / (rollout + train),
        "rollout_s": rollout,
        "train_s": train,
        "wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6, help="timed steps (one more warms up)")
    p.add_argument("--tasks", type=int, default=8, help="task groups per step")
    p.add_argument("--group", type=int, default=8, help="episodes per group")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument(
        "--threads", type=int, default=os.cpu_count() or 2, help="CPU threads, all ranks"
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--strategy", choices=["ddp", "fsdp2"], default="ddp")
    args = p.parse_args()
    procs = [1, 2]
    if args.device == "cuda":
        import torch

        procs = [n for n in procs if n <= torch.cuda.device_count()]
        if not procs:
            sys.exit("--device cuda: no CUDA device is visible")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TURNRL_CACHE", str(Path(tmp) / "cache"))
        results = {n: run(args, n, Path(tmp) / "runs") for n in procs}
    print(
        f"scaling: {args.tasks}x{args.group} episodes/step, tiny {args.hidden}x{args.layers}, "
        f"{args.device}, strategy {args.strategy} "
        f"(1 process: {'none' if args.strategy == 'ddp' else 'fsdp2'}), {args.steps} timed steps"
    )
    print(f"{'processes':>9} {'steps/s':>8} {'rollout s':>10} {'train s':>8} {'wall s':>7}")
    for n, r in results.items():
        print(
            f"{n:>9} {r['steps/s']:>8.3f} {r['rollout_s']:>10.2f} {r['train_s']:>8.2f} "
            f"{r['wall_s']:>7.1f}"
        )
    if len(results) == 2:
        ratio = results[2]["steps/s"] / results[1]["steps/s"]
        print(f"ratio 2 / 1 processes: {ratio:.2f}x steps/s (ideal 2.00x on 2 free cores/GPUs)")


if __name__ == "__main__":
    main()
