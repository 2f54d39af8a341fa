"""Soak test: a long tiny run with faults injected at random, then an audit of what it wrote.

The run is ``guess-tiny`` with small steps, rollouts on Ray workers (``rollout.workers=ray``),
so all four kinds of fault have something to hit. Training episodes are chosen at random (seeded)
to carry a fault that fires at their first tool call:

* ``raise``: the tool raises (the episode must end ENV_ERROR);
* ``hang``: the tool blocks in ``time.sleep`` past the episode timeout (TIMEOUT; its thread stays
  stuck until the sleep ends, and the run goes on);
* ``kill``: the tool SIGKILLs its Ray worker process (the worker is replaced, its episodes re-run).

Besides, the trainer process itself is SIGKILLed a few times at random moments (mid-step,
mid-evaluation, mid-checkpoint) and resumed with ``turnrl train --resume``.

Every fault that fired is logged by the process it fired in (``faults.jsonl``). At the end the
script checks, from the run directory alone: every step 1..N has exactly one metrics row and its
samples, every evaluation exactly one row; ``last.pt`` is at step N and the kept ``step-N.pt``
files are the expected ones; each step's ENV_ERROR and TIMEOUT episodes equal the raise and hang
faults fired in it, its worker deaths and replacements equal the kills; the resume count equals
the process kills. It prints the figures and exits 1 if any check fails.

    .venv/bin/python benchmarks/soak.py [--steps 100] [--kills 2] [--seed 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

STEPS_ARGS = [
    "recipe=guess-tiny",
    "name=soak",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=4",
    "rollout.episode_timeout_s=5",
    "env.eval_tasks=8",
    "eval_every=25",
    "checkpoint_keep_every=10",
    "checkpoint_keep=3",
    "threads=1",
    "optim.minibatch_size=8",
    "optim.micro_batch_size=8",
    "rollout.workers=ray",
    "ray.num_workers=2",
    "ray.max_retries=2",
    "ray.max_replacements=1000",
    "max_staleness=0",
]
HANG_S = 7.0  # past the episode timeout
P_RAISE, P_HANG, P_KILL = 0.04, 0.01, 0.05  # per episode, per episode, per step


# -- the child: a training process with faults in its episodes -------------------------------


def fault_plan(seed: int, step: int, n: int) -> list[str | None]:
    """The fault each of a step's ``n`` episodes carries (at most one kill per step)."""
    rng = random.Random(f"soak-{seed}-{step}")
    plan: list[str | None] = [
        "raise" if (u := rng.random()) < P_RAISE else "hang" if u < P_RAISE + P_HANG else None
        for _ in range(n)
    ]
    if rng.random() < P_KILL:
        plan[rng.randrange(n)] = "kill"
    return plan


def faulty_family(options: dict, log_path: str, driver: int):
    """The guess family whose envs fire the fault their task carries (built inside a worker)."""
    from turnrl.envs.guess import GuessEnv, GuessFamily

    class FaultyGuessEnv(GuessEnv):
        async def reset(self, task):
            self.fault, self.fired = task.payload.get("fault"), False
            return await super().reset(task)

        def _fire(self) -> None:
            if self.fault is None or self.fired:
                return
            self.fired = True
            kind, fid = self.fault
            marker = Path(log_path).with_name(f"killed-{fid}-{driver}")
            if kind == "kill" and marker.exists():
                return  # once per trainer process: the re-run episode plays normally
            record = {"id": fid, "kind": kind, "driver": driver, "pid": os.getpid()}
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.close(fd)
            if kind == "raise":
                raise RuntimeError(f"injected fault {fid}: the tool raised")
            if kind == "hang":
                time.sleep(HANG_S)
            if kind == "kill":
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)

        def guess(self, number: int):
            """Guess the hidden number; the answer says higher, lower or correct."""
            self._fire()
            return super().guess(number)

        def give_up(self):
            """End the episode without finding the number."""
            self._fire()
            return super().give_up()

    family = GuessFamily(**options)
    family.make_env = FaultyGuessEnv
    return family


def child(run_dir: Path, resume: bool, seed: int, steps: int) -> None:
    import turnrl.run.build as build
    import turnrl.run.recipe as loop
    from turnrl.rollout.ray_workers import WorkerSpec
    from turnrl.run.config import load_config

    log_path = str(run_dir.parent / "faults.jsonl")
    driver = os.getpid()

    def for_env(name, options=None, **kw):
        return WorkerSpec(
            make_family=functools.partial(faulty_family, options or {}, log_path, driver), **kw
        )

    WorkerSpec.for_env = staticmethod(for_env)
    plain = build.sample_requests

    def sample_requests(tasks, step, seed, tasks_per_step, group_size):
        requests = plain(tasks, step, seed, tasks_per_step, group_size)
        for i, (req, kind) in enumerate(zip(requests, fault_plan(seed, step, len(requests)))):
            if kind is not None:
                payload = {**req.task.payload, "fault": (kind, f"{step + 1}-{i}")}
                req.task = dataclasses.replace(req.task, payload=payload)
        return requests

    build.sample_requests = sample_requests
    args = [*STEPS_ARGS, f"steps={steps}", f"runs_dir={run_dir.parent}"]
    if resume:
        cfg = load_config(run_dir / "config.yaml")
        loop.train(cfg, resume_dir=run_dir, quiet=True)
    else:
        loop.train(load_config(None, args), quiet=True)


# -- the parent: launch, kill, resume, audit ----------------------------------------------------


def training_rows(mfile: Path) -> int:
    if not mfile.exists():
        return 0
    return sum('"reward/mean"' in ln for ln in mfile.read_text().splitlines())


def audit(run_dir: Path, steps: int, launches: list[int], kills: int) -> tuple[dict, list[str]]:
    from turnrl.run.config import load_config
    from turnrl.train.metrics import read_jsonl

    cfg = load_config(run_dir / "config.yaml")
    B = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    rows = read_jsonl(run_dir / "metrics.jsonl")
    samples = read_jsonl(run_dir / "samples.jsonl")
    fired = [json.loads(ln) for ln in (run_dir.parent / "faults.jsonl").read_text().splitlines()]
    problems: list[str] = []
    train = [r for r in rows if "reward/mean" in r]
    evals = [r for r in rows if "eval/success" in r]
    if [r["step"] for r in train] != list(range(1, steps + 1)):
        problems.append(f"training rows: steps {[r['step'] for r in train]}")
    want_evals = sorted({0, steps, *range(cfg.eval_every, steps + 1, cfg.eval_every)})
    if [r["step"] for r in evals] != want_evals:
        problems.append(f"eval rows at {[r['step'] for r in evals]}, expected {want_evals}")
    per_step = Counter(s["step"] for s in samples)
    for k in range(1, steps + 1):
        want = 2 + (3 if k in want_evals else 0)
        if per_step[k] != want:
            problems.append(f"step {k}: {per_step[k]} samples, expected {want}")
    import torch

    ckpts = run_dir / "checkpoints"
    last = torch.load(ckpts / "last.pt", weights_only=False)["step"]
    kept = sorted(p.name for p in ckpts.glob("step-*.pt"))
    every = cfg.checkpoint_keep_every
    want_kept = [f"step-{s:06d}.pt" for s in range(every, steps + 1, every)][-cfg.checkpoint_keep :]
    if last != steps or kept != want_kept or not (ckpts / "best.pt").exists():
        problems.append(f"checkpoints: last at {last}, kept {kept}, expected {want_kept} + best")

    # Faults: each row was written by the launch its run/resumes names.
    seen = Counter()
    injected = Counter()
    prev: dict | None = None
    for r in train:
        driver = launches[int(r["run/resumes"])]
        ids = {(f["id"], f["kind"]) for f in fired if f["driver"] == driver}
        mine = Counter(kind for fid, kind in ids if fid.startswith(f"{r['step']}-"))
        same = prev is not None and prev["run/resumes"] == r["run/resumes"]
        deaths = r["ray/worker_deaths"] - (prev["ray/worker_deaths"] if same else 0)
        replaced = r["ray/replaced"] - (prev["ray/replaced"] if same else 0)
        lost = r["ray/lost"] - (prev["ray/lost"] if same else 0)
        got = {
            "raise": round(r["termination/env_error"] * B) - lost,
            "hang": round(r["termination/timeout"] * B),
            "kill": deaths,
        }
        for kind in ("raise", "hang", "kill"):
            injected[kind] += mine[kind]
            seen[kind] += got[kind]
            if got[kind] != mine[kind]:
                problems.append(f"step {r['step']}: {mine[kind]} {kind} faults, metrics {got}")
        if replaced != deaths:
            problems.append(f"step {r['step']}: {deaths} workers died, {replaced} replaced")
        seen["replaced"] += replaced
        prev = r
    dropped = sum(r["async/dropped"] for r in train)
    if dropped:
        problems.append(f"{dropped} trajectories were dropped as stale")
    resumes = int(train[-1]["run/resumes"])
    if resumes != kills:
        problems.append(f"{kills} process kills but run/resumes = {resumes}")
    figures = {
        "steps": len(train),
        "eval rows": len(evals),
        "checkpoints kept": kept,
        "faults injected (in the final rows)": dict(injected),
        "faults seen in metrics": dict(seen),
        "faults fired in all (incl. steps redone after a kill)": dict(
            Counter(f["kind"] for f in fired)
        ),
        "workers replaced": seen["replaced"],
        "trajectories dropped as stale": dropped,
        "process kills": kills,
        "resumes (run/resumes)": resumes,
    }
    return figures, problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/soak-run"))
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args.child, args.resume, args.seed, args.steps)

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    run_dir = args.out / "soak"
    rng = random.Random(args.seed)
    # One kill early (before or right after the first checkpoint), the others anywhere.
    targets = sorted([rng.randint(0, 1)] + rng.sample(range(3, args.steps - 2), args.kills - 1))
    t0 = time.monotonic()
    launches: list[int] = []
    log = open(args.out / "trainer.log", "w")
    while True:
        cmd = [sys.executable, __file__, "--child", str(run_dir), "--seed", str(args.seed)]
        cmd += ["--steps", str(args.steps)] + (["--resume"] if launches else [])
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        launches.append(proc.pid)
        if len(launches) > args.kills:
            if proc.wait() != 0:
                sys.exit(f"the final trainer failed (exit {proc.returncode}); see {log.name}")
            break
        target = targets[len(launches) - 1]
        mfile = run_dir / "metrics.jsonl"
        while training_rows(mfile) < target or (target == 0 and not mfile.exists()):
            if proc.poll() is not None:
                sys.exit(f"the trainer exited early ({proc.returncode}); see {log.name}")
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 2.0))  # land anywhere: mid-step, eval, checkpoint
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"killed the trainer after step {training_rows(mfile)} (target {target})")
    wall = time.monotonic() - t0
    figures, problems = audit(run_dir, args.steps, launches, args.kills)
    print(f"soak: {args.steps} steps in {wall:.0f} s ({args.out})")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    for p in problems:
        print(f"FAIL {p}")
    print("all checks passed" if not problems else f"{len(problems)} checks failed")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
