"""Soak test: a long tiny run with faults injected at random in every path that runs env code,
then an audit of what it wrote.

The run is ``guess-tiny`` with small steps, rollouts on Ray workers (``rollout.workers=ray``),
its warm start (the expert's demonstrations, then SFT) played afresh in a cache of its own.
Faults, chosen at random (seeded):

* training episodes, at their first tool call or at reset:
  ``raise`` (the tool raises: ENV_ERROR), ``hang`` (the plain ``def`` tool blocks in
  ``time.sleep`` past the episode timeout: TIMEOUT), ``block`` (``async def reset`` blocks its
  event loop in ``time.sleep``: TIMEOUT, the run goes on), ``reset`` (reset raises: ENV_ERROR),
  ``kill`` (the tool SIGKILLs its Ray worker: the worker is replaced, its episodes re-run);
* held-out evaluation episodes (run by the trainer itself): ``raise``, ``hang``, ``block``,
  ``reset``, the same faults in every evaluation;
* the warm start's expert episodes: the expert's ``act`` raises or hangs (left out of SFT);
* the trainer process itself, SIGKILLed during the warm start's SFT and at random moments of
  RL (mid-step, mid-evaluation, mid-checkpoint), then resumed with ``turnrl train --resume``.

Every fault that fired is logged by the process it fired in (``faults.jsonl``). At the end the
script checks, from the run directory alone: every step 1..N has exactly one metrics row and its
samples, every evaluation exactly one row and its samples; ``last.pt`` is at step N and the kept
``step-N.pt`` files are the expected ones; each step's ENV_ERROR and TIMEOUT episodes equal the
faults fired in it, its worker deaths and replacements equal the kills; each evaluation's
``eval/ending/env_error`` and ``eval/ending/timeout`` equal the faults its tasks carry; the warm start left
out exactly the failed expert episodes; the resume count equals the process kills; and
``turnrl report``, ``turnrl view --export`` and ``turnrl export`` read the run. It prints the
figures and exits 1 if any check fails.

    .venv/bin/python benchmarks/soak.py [--steps 200] [--kills 3] [--seed 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import re
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
# per episode: the tool raises, the tool hangs, reset blocks its loop, reset raises
EPISODE_FAULTS = {"raise": 0.03, "hang": 0.01, "block": 0.01, "reset": 0.02}
P_KILL = 0.04  # per step: a tool kills its Ray worker
EVAL_FAULTS = {"raise": 0.1, "hang": 0.08, "block": 0.08, "reset": 0.1}  # per held-out task
P_EXPERT = {"raise": 0.03, "hang": 0.02}  # per expert episode of the warm start
ERRORS, TIMEOUTS = ("raise", "reset"), ("hang", "block")  # how each fault ends its episode


# -- the child: a training process with faults in its episodes -------------------------------


def _draw(rng: random.Random, odds: dict[str, float]) -> str | None:
    u, edge = rng.random(), 0.0
    for kind, p in odds.items():
        edge += p
        if u < edge:
            return kind
    return None


def fault_plan(seed: int, step: int, n: int) -> list[str | None]:
    """The fault each of a step's ``n`` episodes carries (at most one kill per step)."""
    rng = random.Random(f"soak-{seed}-{step}")
    plan = [_draw(rng, EPISODE_FAULTS) for _ in range(n)]
    if rng.random() < P_KILL:
        plan[rng.randrange(n)] = "kill"
    return plan


def eval_plan(seed: int, n: int) -> list[str | None]:
    """The fault each held-out task carries (every evaluation plays the same tasks); higher odds
    than in training, so a few fire in every evaluation."""
    rng = random.Random(f"soak-eval-{seed}")
    return [_draw(rng, EVAL_FAULTS) for _ in range(n)]


def expert_plan(seed: int, n: int) -> list[str | None]:
    """The fault each of the warm start's ``n`` expert episodes carries."""
    rng = random.Random(f"soak-expert-{seed}")
    return [_draw(rng, P_EXPERT) for _ in range(n)]


def log_fault(log_path: str, record: dict) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (json.dumps(record) + "\n").encode())
    os.close(fd)


def faulty_family(options: dict, log_path: str, driver: int):
    """The guess family whose envs fire the fault their task carries: at reset (``block``,
    ``reset``) or at the first tool call (``raise``, ``hang``, ``kill``)."""
    from turnrl.envs.guess import GuessEnv, GuessFamily

    class FaultyGuessEnv(GuessEnv):
        async def reset(self, task):
            self.fault, self.fired = task.payload.get("fault"), False
            if self.fault is not None and self.fault[0] in ("block", "reset"):
                self._fire()  # a blocking call inside async def, or a raise
            return await super().reset(task)

        def _fire(self) -> None:
            if self.fault is None or self.fired:
                return
            self.fired = True
            kind, fid = self.fault
            marker = Path(log_path).with_name(f"killed-{fid}-{driver}")
            if kind == "kill" and marker.exists():
                return  # once per trainer process: the re-run episode plays normally
            log_fault(log_path, {"id": fid, "kind": kind, "driver": driver, "pid": os.getpid()})
            if kind in ("raise", "reset"):
                raise RuntimeError(f"injected fault {fid}: {kind}")
            if kind in ("hang", "block"):
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


class FaultyExpert:
    """The expert of a warm-start episode, whose ``act`` raises or hangs as planned."""

    def __init__(self, agent, fault, log_path: str, driver: int) -> None:
        self.agent, self.fault, self.log_path, self.driver = agent, fault, log_path, driver

    def act(self, observation: str):
        if self.fault is not None:
            kind, fid = self.fault
            self.fault = None
            log_fault(self.log_path, {"id": fid, "kind": kind, "driver": self.driver})
            if kind == "raise":
                raise RuntimeError(f"injected fault {fid}: the expert raised")
            time.sleep(HANG_S)
        return self.agent.act(observation)


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

    def sample_requests(tasks, step, run_seed, tasks_per_step, group_size):
        requests = plain(tasks, step, run_seed, tasks_per_step, group_size)
        for i, (req, kind) in enumerate(zip(requests, fault_plan(seed, step, len(requests)))):
            if kind is not None:
                payload = {**req.task.payload, "fault": (kind, f"{step + 1}-{i}")}
                req.task = dataclasses.replace(req.task, payload=payload)
        return requests

    build.sample_requests = sample_requests
    real_preflight = loop.preflight

    def preflight(cfg):
        """The trainer's own family (evaluation, the warm start) fires faults too."""
        family, train_tasks, eval_tasks = real_preflight(cfg)
        family = faulty_family(cfg.env.options, log_path, driver)
        plain_expert = family.expert
        demos = expert_plan(seed, cfg.sft.episodes)

        def expert(task, seed=0, noise=0.0):
            i = seed - cfg.seed  # the warm start's episode i plays with seed cfg.seed + i
            fault = (demos[i], f"d{i}") if 0 <= i < len(demos) and demos[i] else None
            return FaultyExpert(plain_expert(task, seed, noise), fault, log_path, driver)

        family.expert = expert
        plan = eval_plan(seed, len(eval_tasks))
        eval_tasks = [
            dataclasses.replace(t, payload={**t.payload, "fault": (kind, f"e{i}")})
            if kind is not None
            else t
            for i, (t, kind) in enumerate(zip(eval_tasks, plan))
        ]
        return family, train_tasks, eval_tasks

    loop.preflight = preflight
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


def audit(
    run_dir: Path, steps: int, launches: list[int], kills: int, log_text: str, seed: int
) -> tuple[dict, list[str]]:
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
            "env_error": round(r["termination/env_error"] * B) - lost,
            "timeout": round(r["termination/timeout"] * B),
            "kill": deaths,
        }
        want = {
            "env_error": sum(mine[k] for k in ERRORS),
            "timeout": sum(mine[k] for k in TIMEOUTS),
            "kill": mine["kill"],
        }
        for kind in (*ERRORS, *TIMEOUTS, "kill"):
            injected[kind] += mine[kind]
        for ending in want:
            seen[ending] += got[ending]
        if got != want:
            problems.append(f"step {r['step']}: faults {dict(mine)}, metrics {got}")
        if replaced != deaths:
            problems.append(f"step {r['step']}: {deaths} workers died, {replaced} replaced")
        seen["replaced"] += replaced
        prev = r
    # Evaluations: each one's cut episodes are its tasks' faults (the same tasks every time).
    # A fault at reset always fires; one at the first tool call fires only if the policy calls
    # a tool in that episode (the faults log cannot say which evaluation it fired in), so an
    # evaluation cuts at least the reset faults' episodes and at most all of the faults'.
    plan = eval_plan(seed, cfg.env.eval_tasks)
    errors = (sum(k == "reset" for k in plan), sum(k in ERRORS for k in plan))
    timeouts = (sum(k == "block" for k in plan), sum(k in TIMEOUTS for k in plan))
    fired_in_evals = []
    for r in evals:
        got = (r.get("eval/ending/env_error"), r.get("eval/ending/timeout"))
        fired_in_evals.append(got)
        if not (errors[0] <= got[0] <= errors[1] and timeouts[0] <= got[1] <= timeouts[1]):
            problems.append(
                f"eval @ {r['step']}: (env_errors, timeouts) {got}, expected within "
                f"{errors} and {timeouts}"
            )
    # The warm start: the expert episodes that failed were left out, and no other.
    demos = expert_plan(seed, cfg.sft.episodes)
    want_out = sum(k is not None for k in demos)
    said = re.findall(r"warm start: (\d+) of (\d+) expert episodes ended early", log_text)
    left_out = [int(a) for a, _ in said]
    if left_out != [want_out]:
        problems.append(f"warm start left out {left_out} expert episodes, expected [{want_out}]")
    dropped = sum(r["async/dropped"] for r in train)
    if dropped:
        problems.append(f"{dropped} trajectories were dropped as stale")
    # every launch after a kill resumed (the last one may have had nothing left to write)
    resumes = int((run_dir / "resumes").read_text())
    if resumes != kills or int(train[-1]["run/resumes"]) > resumes:
        problems.append(f"{kills} process kills but {resumes} resumes")
    # What a user reads the run with: every command goes through the torn-file readers.
    for cmd in (
        ["report", str(run_dir)],
        ["view", str(run_dir), "--export", str(run_dir.parent / "page.html")],
        ["export", str(run_dir), str(run_dir.parent / "exported")],
    ):
        shutil.rmtree(run_dir.parent / "exported", ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-m", "turnrl.cli", *cmd], capture_output=True, text=True
        )
        if done.returncode != 0:
            problems.append(f"turnrl {cmd[0]}: exit {done.returncode}: {done.stderr[-300:]}")
    figures = {
        "steps": len(train),
        "eval rows": len(evals),
        "eval faults planned per evaluation (at reset, in all)": {
            "env_error": errors,
            "timeout": timeouts,
        },
        "eval episodes cut (env_error, timeout), each evaluation": fired_in_evals,
        "warm start expert episodes left out": f"{left_out} (planned {want_out})",
        "checkpoints kept": kept,
        "faults injected in training episodes (in the final rows)": dict(injected),
        "their endings in the metrics": dict(seen),
        "faults fired in all (incl. steps redone after a kill)": dict(
            Counter(f["kind"] for f in fired)
        ),
        "workers replaced": seen["replaced"],
        "trajectories dropped as stale": dropped,
        "process kills": kills,
        "resumes (run_dir/resumes)": resumes,
    }
    return figures, problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--kills", type=int, default=3, help="trainer kills, one in the warm start")
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
    # One kill in the warm start's SFT, one early in RL (before or right after the first
    # checkpoint), the others anywhere.
    rl = [rng.randint(0, 1)] + rng.sample(range(3, max(args.steps - 20, 4)), max(args.kills - 2, 0))
    targets: list[int | str] = ["warm", *sorted(rl)][: args.kills]
    t0 = time.monotonic()
    launches: list[int] = []
    log_path = args.out / "trainer.log"
    log = open(log_path, "w")
    env = {**os.environ, "TURNRL_CACHE": str(args.out / "cache")}  # a warm start played afresh
    while True:
        cmd = [sys.executable, __file__, "--child", str(run_dir), "--seed", str(args.seed)]
        cmd += ["--steps", str(args.steps)] + (["--resume"] if launches else [])
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True, env=env)
        launches.append(proc.pid)
        if len(launches) > len(targets):
            if proc.wait() != 0:
                sys.exit(f"the final trainer failed (exit {proc.returncode}); see {log.name}")
            break
        target = targets[len(launches) - 1]
        mfile = run_dir / "metrics.jsonl"
        if target == "warm":  # a few seconds into SFT, after the demonstrations were played
            while "warm start: SFT on" not in log_path.read_text():
                if proc.poll() is not None:
                    sys.exit(f"the trainer exited early ({proc.returncode}); see {log.name}")
                time.sleep(0.2)
            time.sleep(rng.uniform(1.0, 6.0))
        else:
            while training_rows(mfile) < target or (target == 0 and not mfile.exists()):
                if proc.poll() is not None:
                    sys.exit(f"the trainer exited early ({proc.returncode}); see {log.name}")
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 2.0))  # land anywhere: mid-step, eval, checkpoint
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"killed the trainer after step {training_rows(mfile)} (target {target})")
    wall = time.monotonic() - t0
    log.close()
    figures, problems = audit(
        run_dir, args.steps, launches, len(targets), log_path.read_text(), args.seed
    )
    print(f"soak: {args.steps} steps in {wall:.0f} s ({args.out})")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    for p in problems:
        print(f"FAIL {p}")
    print("all checks passed" if not problems else f"{len(problems)} checks failed")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
