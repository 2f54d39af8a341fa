"""Shipped recipes from an empty cache: held-out success before -> after, and wall time.

Each run is ``turnrl train --quiet recipe=NAME seed=S`` in a fresh process with
``TURNRL_CACHE`` set to a new empty folder, so it pays the whole warm start as on a fresh
clone. Before and after are the run's own held-out evals (step 0, after the warm start, and the
last step, read from its metrics.jsonl); wall time is the whole command, CPU time the run's
processes' user + system seconds (unchanged when runs share the cores). For a recipe on a
pretrained model the base model (no warm start, no RL) is also scored on the same held-out
episodes first, by ``turnrl eval MODEL recipe=NAME seed=S`` in its own process, timed apart
from the run. Over seeds it prints the mean and the
sample standard deviation (never the best run), with each seed's figures, the versions and the
machine. Runs go one after another: each uses the cores the recipe's ``threads`` asks for.
To share 2 cores between two lists, start two copies with ``--set threads=1``; wall times then
include the contention, CPU times do not.

    .venv/bin/python benchmarks/recipes.py                         # every recipe, seeds 0 1 2
    .venv/bin/python benchmarks/recipes.py --recipes code-tiny,web-tiny --seeds 5
    .venv/bin/python benchmarks/recipes.py --recipes guess-tiny --seeds 1 --quick   # smoke
    .venv/bin/python benchmarks/recipes.py --out results.json --markdown
    .venv/bin/python benchmarks/recipes.py --recipes smollm2-tools --seeds 1,2 --out b.json
    .venv/bin/python benchmarks/recipes.py --combine a.json b.json --markdown  # one table

A recipe takes up to 20 minutes of one core per seed (guess-tiny and locker-tiny about one): all
eight over 3 seeds are about 4 hours of one core, 2 hours as two lists side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from turnrl.run.config import load_config, recipe_names
from turnrl.run.models import named_model

# --quick: the same code path at smoke-test size (minutes become seconds); not a figure
QUICK = [
    "steps=2",
    "sft.episodes=16",
    "sft.epochs=1",
    "tiny.induction_steps=0",
    "env.eval_tasks=4",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
]


def run_recipe(recipe: str, seed: int, overrides: list[str], workdir: Path) -> dict:
    """One run from an empty cache; its before/after held-out success and wall time."""
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=workdir))
    runs = workdir / "runs"
    name = f"{recipe}-s{seed}"
    cmd = [
        sys.executable,
        "-c",
        "from turnrl.cli import main; main()",
        "train",
        "--quiet",
        f"recipe={recipe}",
        f"seed={seed}",
        f"name={name}",
        f"runs_dir={runs}",
        *overrides,
    ]
    env = {**os.environ, "TURNRL_CACHE": str(cache)}
    log = workdir / f"{name}.log"
    t0, cpu0 = time.monotonic(), cpu_seconds()
    with log.open("w") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise RuntimeError(f"{name} exited {proc.returncode}; log {log}:\n" + "\n".join(tail))
    rows = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/success" in r]
    if len(evals) < 2 or evals[0]["step"] != 0:
        raise RuntimeError(f"{name}: metrics.jsonl has no eval at step 0 and at the end")
    return {
        "recipe": recipe,
        "seed": seed,
        "before": evals[0]["eval/success"],
        "after": evals[-1]["eval/success"],
        "eval_episodes": int(evals[-1]["eval/episodes"]),
        "steps": evals[-1]["step"],
        "wall_s": wall,
        "cpu_s": cpu,
    }


def base_success(recipe: str, seed: int, overrides: list[str], workdir: Path) -> dict | None:
    """The recipe's model before any training, on the run's held-out episodes (same tasks,
    same sampling seed); None for a model built from scratch (it has no base to score)."""
    cfg = load_config(None, [f"recipe={recipe}", *overrides])
    if named_model(cfg.model.name).from_scratch:
        return None
    out = workdir / f"{recipe}-s{seed}-base.json"
    cmd = [
        sys.executable,
        "-c",
        "from turnrl.cli import main; main()",
        "eval",
        cfg.model.name,
        f"recipe={recipe}",
        f"seed={seed}",
        f"runs_dir={workdir / 'runs'}",
        *overrides,
        "--no-baselines",
        "--out",
        str(out),
    ]
    log = workdir / f"{recipe}-s{seed}-base.log"
    t0, cpu0 = time.monotonic(), cpu_seconds()
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise RuntimeError(
            f"base eval of {recipe} exited {proc.returncode}; log {log}:\n" + "\n".join(tail)
        )
    result = json.loads(out.read_text())
    return {
        "success": result["success"],
        "wall_s": time.monotonic() - t0,
        "cpu_s": cpu_seconds() - cpu0,
    }


def cpu_seconds() -> float:
    """User + system seconds of every finished child process (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summary(recipe: str, runs: list[dict]) -> dict:
    before, after = spread([r["before"] for r in runs]), spread([r["after"] for r in runs])
    gains = [r["after"] - r["before"] for r in runs]
    bases = [r["base"] for r in runs if r.get("base") is not None]
    return {
        "recipe": recipe,
        "base": spread(bases) if bases else None,
        "seeds": [r["seed"] for r in runs],
        "eval_episodes": runs[0]["eval_episodes"],
        "before": before,
        "after": after,
        "gain": spread(gains),
        "gain_holds": all(g > 0 for g in gains),  # every seed gains, not only on average
        "wall_s": spread([r["wall_s"] for r in runs]),
        "cpu_s": spread([r["cpu_s"] for r in runs]),
    }


def versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "turnrl_commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs, {platform.system()}",
    }


def fmt(ms: tuple[float, float], pct: bool = True) -> str:
    mean, sd = ms
    return f"{100 * mean:5.1f} ± {100 * sd:4.1f}" if pct else f"{mean / 60:5.1f} ± {sd / 60:3.1f}"


def print_summary(recipe: str, runs: list[dict]) -> dict:
    s = summary(recipe, runs)
    base_text = "" if s["base"] is None else f"base {fmt(s['base'])}, warm start "
    print(
        f"{recipe:22s} mean ± sd over {len(runs)} seeds {s['seeds']}: {base_text}"
        f"{fmt(s['before'])} -> {fmt(s['after'])} % (gain {fmt(s['gain'])}"
        f"{'' if s['gain_holds'] else ', NOT on every seed'}), "
        f"wall {fmt(s['wall_s'], pct=False)} min, CPU {fmt(s['cpu_s'], pct=False)} min",
        flush=True,
    )
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", default="all", help="comma-separated names, or 'all'")
    ap.add_argument("--seeds", default="3", help="N (seeds 0..N-1) or a list such as 1,2")
    ap.add_argument("--quick", action="store_true", help="smoke-test size (no real figure)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override")
    ap.add_argument("--out", type=Path, help="write every run and summary as JSON")
    ap.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    ap.add_argument("--keep", type=Path, help="keep run folders and logs here (default: temp)")
    ap.add_argument(
        "--combine", type=Path, nargs="+", help="no runs: summarise the runs in these --out files"
    )
    args = ap.parse_args()
    seeds = (
        [int(s) for s in args.seeds.split(",") if s]
        if "," in args.seeds
        else range(int(args.seeds))
    )
    if not seeds and not args.combine:
        sys.exit("--seeds: no seeds (N runs seeds 0..N-1; a list such as 0, or 1,2 runs those)")
    names = recipe_names() if args.recipes == "all" else args.recipes.split(",")
    unknown = sorted(set(names) - set(recipe_names()))
    if unknown:
        sys.exit(f"--recipes: unknown {unknown}; shipped: {', '.join(recipe_names())}")
    overrides = (QUICK if args.quick else []) + args.set
    results, summaries = [], []
    if args.combine:
        saved = [json.loads(f.read_text()) for f in args.combine]
        for f, d in zip(args.combine, saved):
            print(f"# {f}: {d['versions']}; overrides: {d['overrides'] or 'none'}", flush=True)
        info = {f"{f}": d["versions"] for f, d in zip(args.combine, saved)}
    else:
        workdir = Path(args.keep or tempfile.mkdtemp(prefix="turnrl-recipes-"))
        workdir.mkdir(parents=True, exist_ok=True)
        info = versions()
        print(f"# {info}", flush=True)
        print(f"# overrides: {overrides or 'none'}; work folder {workdir}", flush=True)
    if args.combine:
        results = [
            r for d in saved for r in d["runs"] if args.recipes == "all" or r["recipe"] in names
        ]
        for recipe in dict.fromkeys(r["recipe"] for r in results):
            summaries.append(print_summary(recipe, [r for r in results if r["recipe"] == recipe]))
    for recipe in [] if args.combine else names:
        runs = []
        for seed in seeds:
            base = base_success(recipe, seed, overrides, workdir)
            r = run_recipe(recipe, seed, overrides, workdir)
            r["base"] = None if base is None else base["success"]
            r["base_eval"] = base
            runs.append(r)
            base_text = "" if base is None else f"base {100 * base['success']:5.1f} %, warm start "
            print(
                f"{recipe:22s} seed {seed}: {base_text}"
                f"{100 * r['before']:5.1f} -> {100 * r['after']:5.1f} % "
                f"on {r['eval_episodes']} held-out episodes in {r['wall_s'] / 60:.1f} min "
                f"(CPU {r['cpu_s'] / 60:.1f} min)",
                flush=True,
            )
        results += runs
        summaries.append(print_summary(recipe, runs))
    if args.markdown:
        print(
            "\n| recipe | held-out episodes | base model (%) | before RL (%) | after RL (%) "
            "| gain (points) | wall (min) | CPU (min) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for s in summaries:
            holds = "" if s["gain_holds"] else " (not on every seed)"
            base = "–" if s["base"] is None else fmt(s["base"])
            print(
                f"| {s['recipe']} | {s['eval_episodes']} | {base} | {fmt(s['before'])} | "
                f"{fmt(s['after'])} | {fmt(s['gain'])}{holds} | {fmt(s['wall_s'], pct=False)} | "
                f"{fmt(s['cpu_s'], pct=False)} |"
            )
    if args.out:
        args.out.write_text(
            json.dumps(
                {"versions": info, "overrides": overrides, "runs": results, "summary": summaries},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
