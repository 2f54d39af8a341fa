"""Measured reward drift against the audit's prediction: a run's proxy and true success beside
the proxy success ``turnrl audit``'s catch rate c predicts, p + (1 - p)(1 - c)
(:func:`turnrl.rewards.audit.predicted_gap`). The report's drift panel draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turnrl.rewards.audit import predicted_gap
from turnrl.train.metrics import read_jsonl

TRAIN_KEYS = ("success/true", "success/proxy")  # rollouts of each training step
EVAL_KEYS = ("eval/success", "eval/proxy_success")  # held-out evaluations


def drift_summary(
    metrics: Path | str | Sequence[Mapping[str, Any]],
    c: float,
    last: int = 5,
    keys: tuple[str, str] = TRAIN_KEYS,
) -> dict[str, float]:
    """Proxy and true success over the last ``last`` records of a run's ``metrics.jsonl`` (or
    its rows) that hold both ``keys`` (true, proxy), the measured gap, and the gap the audit's
    ``c`` predicts at that p. ``keys=EVAL_KEYS, last=1``: the final held-out evaluation."""
    rows = read_jsonl(metrics) if isinstance(metrics, str | Path) else list(metrics)
    true_key, proxy_key = keys
    rows = [r for r in rows if true_key in r and proxy_key in r][-last:]
    if not rows:
        raise ValueError(f"no records with {true_key} and {proxy_key}")
    p = sum(r[true_key] for r in rows) / len(rows)
    proxy = sum(r[proxy_key] for r in rows) / len(rows)
    return {
        "steps": float(len(rows)),
        "true_success": p,
        "proxy_success": proxy,
        "measured_gap": proxy - p,
        "predicted_gap": predicted_gap(p, c),
        "error": (proxy - p) - predicted_gap(p, c),
    }


def plot_drift(metrics: Path | str | Sequence[Mapping[str, Any]], c: float, out: Any) -> Any:
    """PNG of proxy and true success per training step (lines) and at held-out evaluations
    (markers), with the proxy success the audit predicts from the true success: p + (1 - p)(1 - c).
    ``out``: a path or a binary file object."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(metrics) if isinstance(metrics, str | Path) else list(metrics)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for (true_key, proxy_key), where, style in (
        (TRAIN_KEYS, "train rollouts", {"marker": None}),
        (EVAL_KEYS, "held-out eval", {"marker": "o", "linestyle": ":"}),
    ):
        pts = [r for r in rows if true_key in r and proxy_key in r]
        if not pts:
            continue
        steps = [r["step"] for r in pts]
        true = [r[true_key] for r in pts]
        ax.plot(steps, [r[proxy_key] for r in pts], color="C0", label=f"proxy, {where}", **style)
        ax.plot(steps, true, color="C1", label=f"true, {where}", **style)
        predicted = [p + predicted_gap(p, c) for p in true]
        ax.plot(
            steps,
            predicted,
            color="C2",
            label=f"predicted proxy, {where}",
            **{**style, "linestyle": "--", "marker": "x" if style["marker"] else None},
        )
    ax.set_title(f"proxy vs true success; predicted p + (1 - p)(1 - c), c = {c:.2f}", fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(out, format="png", dpi=120)
    plt.close(fig)
    return out
