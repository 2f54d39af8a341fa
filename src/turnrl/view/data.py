"""What the viewer shows, read from run directories as plain JSON-able data.

A run's summary (metric curves, one row per episode, config, the reward audit) is small: a few
hundred KB for a 200-step run, so the page gets it whole and filters in the browser. A step's
trajectory records are larger and fetched one step at a time.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from turnrl.train.metrics import read_jsonl
from turnrl.view.records import EPISODES, record_steps

AUDIT_NAME = "audit.json"
EPISODE_FIELDS = (
    "step",
    "i",
    "task",
    "tier",
    "group",
    "reward",
    "success",
    "end",
    "flags",
    "turns",
    "rec",
)


def is_run(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file()


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories named by ``paths``: each a run, or a folder of runs (``runs/``).
    Raises ValueError naming the first path that is neither."""
    runs: list[Path] = []
    for path in paths:
        path = Path(path)
        if is_run(path):
            runs.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if is_run(p)) if path.is_dir() else []
        if not inside:
            what = "does not exist" if not path.exists() else "has no metrics.jsonl"
            raise ValueError(f"{path}: {what}; expected a run directory or a folder of runs")
        runs.extend(inside)
    return runs


def read_audit_c(path: Path) -> float:
    """The pooled catch rate c of a ``turnrl audit`` JSON report."""
    c = json.loads(Path(path).read_text())["overall"]["c"]
    if isinstance(c, bool) or not isinstance(c, int | float) or not 0.0 <= c <= 1.0:
        raise ValueError(f"overall.c must be a number in [0, 1], got {c!r}")
    return float(c)


def drift_table(rows: list[dict], c: float) -> str:
    """HTML: measured proxy-true gaps against those the audit's c predicts, p + (1 - p)(1 - c)."""
    from turnrl.view.drift import EVAL_KEYS, TRAIN_KEYS, drift_summary

    out = [
        f"<p>audit: c = {c:.3f} (share of wrong mutants the training tests catch); predicted "
        "proxy success = p + (1 - p)(1 - c) at true success p.</p>",
        "<table class='drift'><tr><th>where</th><th>records</th><th>true success p</th>"
        "<th>proxy success</th><th>measured gap</th><th>predicted gap</th>"
        "<th>measured - predicted</th></tr>",
    ]
    found = False
    for label, keys, last in (
        ("train rollouts, last 5 steps", TRAIN_KEYS, 5),
        ("last held-out eval", EVAL_KEYS, 1),
    ):
        try:
            d = drift_summary(rows, c, last=last, keys=keys)
        except ValueError:
            continue
        found = True
        out.append(
            f"<tr><td>{label}</td><td>{d['steps']:.0f}</td><td>{d['true_success']:.3f}</td>"
            f"<td>{d['proxy_success']:.3f}</td><td>{d['measured_gap']:.3f}</td>"
            f"<td>{d['predicted_gap']:.3f}</td><td>{d['error']:+.3f}</td></tr>"
        )
    if not found:
        return "<p>no records with both proxy and true success.</p>"
    return "\n".join([*out, "</table>"])


def audit_of(run_dir: Path, rows: list[dict]) -> dict[str, Any] | None:
    path = run_dir / AUDIT_NAME
    if not path.exists():
        return None
    try:
        c = read_audit_c(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {
            "c": None,
            "html": f"<p>{html.escape(str(path))} is unusable: {html.escape(str(e))}</p>",
        }
    return {"c": c, "html": drift_table(rows, c)}


def run_summary(run_dir: Path) -> dict[str, Any]:
    """Everything the overview pages need for one run, as columns (compact JSON)."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    curves: dict[str, dict[str, list]] = {}
    for r in rows:
        for k, v in r.items():
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool):
                c = curves.setdefault(k, {"x": [], "y": []})
                c["x"].append(r["step"])
                c["y"].append(v)
    episodes = read_jsonl(run_dir / EPISODES)
    config = run_dir / "config.yaml"
    return {
        "name": run_dir.name,
        "path": str(run_dir),
        "curves": curves,
        "episodes": {f: [e.get(f) for e in episodes] for f in EPISODE_FIELDS},
        "record_steps": record_steps(run_dir),
        "config": config.read_text() if config.exists() else "",
        "audit": audit_of(run_dir, rows),
    }
