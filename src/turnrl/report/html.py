"""A self-contained HTML report of a run: curves (PNG inlined) and sample trajectories.

When the run directory holds a reward audit (``audit.json``, written by ``turnrl audit --out`` or
copied there by ``turnrl report RUN_DIR --audit FILE``), the report adds the drift panel: measured
proxy and true success next to the proxy success the audit predicts from the true success,
p + (1 - p)(1 - c), and a table of measured against predicted gaps.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from turnrl.train.metrics import read_jsonl  # noqa: E402
from turnrl.types import TerminationReason  # noqa: E402

PANELS = [
    ("Reward", ["reward/mean"]),
    (
        "Success: proxy vs true (train rollouts) and held-out eval",
        ["success/proxy", "success/true", "eval/success"],
    ),
    ("Hack rate and truncation rate", ["hack_rate", "truncation_rate"]),
    (
        "Episode endings (share of each step's episodes)",
        [f"termination/{r.value}" for r in TerminationReason],
    ),
    ("Episode lengths", ["episode/turns_mean"]),
    ("Tokens per episode", ["episode/tokens_mean"]),
    ("KL", ["kl"]),
    ("Entropy", ["entropy"]),
    ("Loss", ["loss"]),
]


AUDIT_NAME = "audit.json"


def read_audit_c(path: Path) -> float:
    """The pooled catch rate c of a ``turnrl audit`` JSON report."""
    c = json.loads(Path(path).read_text())["overall"]["c"]
    if isinstance(c, bool) or not isinstance(c, int | float) or not 0.0 <= c <= 1.0:
        raise ValueError(f"overall.c must be a number in [0, 1], got {c!r}")
    return float(c)


def drift_section(rows: list[dict], audit_path: Path) -> list[str]:
    """HTML: the drift plot and a measured-vs-predicted table, or a note saying why not."""
    from turnrl.rewards.audit import EVAL_KEYS, TRAIN_KEYS, drift_summary, plot_drift

    head = "<h2>Reward drift: proxy vs true success and the audit's prediction</h2>"
    try:
        c = read_audit_c(audit_path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [head, f"<p>{html.escape(str(audit_path))} is unusable: {html.escape(str(e))}</p>"]
    table = [
        f"<p>audit: c = {c:.3f} (share of wrong mutants the training tests catch); predicted "
        "proxy success = p + (1 - p)(1 - c) at true success p.</p>",
        "<table><tr><th>where</th><th>records</th><th>true success p</th><th>proxy success</th>"
        "<th>measured gap</th><th>predicted gap</th><th>measured - predicted</th></tr>",
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
        table.append(
            f"<tr><td>{label}</td><td>{d['steps']:.0f}</td><td>{d['true_success']:.3f}</td>"
            f"<td>{d['proxy_success']:.3f}</td><td>{d['measured_gap']:.3f}</td>"
            f"<td>{d['predicted_gap']:.3f}</td><td>{d['error']:+.3f}</td></tr>"
        )
    if not found:
        return [head, "<p>no records with both proxy and true success.</p>"]
    buf = io.BytesIO()
    plot_drift(rows, c, buf)
    img = base64.b64encode(buf.getvalue()).decode()
    return [head, *table, "</table>", f"<img alt='reward drift' src='data:image/png;base64,{img}'>"]


def _plot(title: str, keys: list[str], rows: list[dict]) -> str | None:
    series = {k: [(r["step"], r[k]) for r in rows if k in r] for k in keys}
    if not any(series.values()):
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=90)
    for k, pts in series.items():
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, ms=3, label=k)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def write_report(run_dir: Path, extra_panels: list[tuple[str, list[str]]] = ()) -> Path:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    imgs = [(t, _plot(t, k, rows)) for t, k in [*PANELS, *extra_panels]]
    samples = read_jsonl(run_dir / "samples.jsonl")
    config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").exists() else ""
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>turnrl run</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}img{margin:4px}"
        "pre{background:#f6f6f6;padding:6px;white-space:pre-wrap}.m{border-left:3px solid #ccc;margin:4px 0;padding-left:6px}"
        ".assistant{border-color:#36c}.tool{border-color:#999}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style>",
        f"<h1>turnrl run: {html.escape(run_dir.name)}</h1>",
    ]
    if evals:
        parts.append(
            "<h2>Held-out evaluation</h2><table><tr><th>step</th><th>success</th><th>pass@k</th><th>reward</th><th>turns</th><th>hack rate</th></tr>"
        )
        for r in evals:
            parts.append(
                f"<tr><td>{r['step']}</td><td>{r.get('eval/success', 0):.3f} ± {r.get('eval/success_stderr', 0):.3f}</td><td>{r.get('eval/pass_at_k', 0):.3f}</td><td>{r.get('eval/reward', 0):.3f}</td><td>{r.get('eval/turns', 0):.2f}</td><td>{r.get('eval/hack_rate', 0):.3f}</td></tr>"
            )
        parts.append("</table>")
    if (run_dir / AUDIT_NAME).exists():
        parts += drift_section(rows, run_dir / AUDIT_NAME)
    parts.append("<h2>Curves</h2>")
    parts += [f"<img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>" for t, b in imgs if b]
    parts.append("<h2>Sample trajectories</h2>")
    for s in samples[-6:]:
        parts.append(
            f"<details><summary>step {s['step']} · task {html.escape(s['task_id'])} · reward {s['reward']} · {s['termination']} {html.escape(' '.join(s.get('flags') or []))}</summary>"
        )
        for m in s["messages"]:
            parts.append(
                f"<div class='m {m['role']}'><b>{m['role']}</b><pre>{html.escape(m['content'])}</pre></div>"
            )
        parts.append("</details>")
    parts.append(f"<h2>Config</h2><pre>{html.escape(config)}</pre>")
    out = run_dir / "report.html"
    out.write_text("\n".join(parts), encoding="utf-8")
    return out
