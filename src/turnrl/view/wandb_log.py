"""Weights & Biases logging (``logging.wandb=true``): each step's metrics and a table of its
recorded trajectories.

Nothing here needs a network: with ``WANDB_MODE=offline`` (or no login) the run is written under
``RUN_DIR/wandb/`` and ``wandb sync`` uploads it later. A resumed run continues the same W&B run
(its id is kept in ``RUN_DIR/wandb-id.txt``).
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from typing import Any

COLUMNS = ["step", "task", "group", "reward", "advantage", "ending", "flags", "transcript"]


def require_wandb() -> None:
    """Fail before any work when W&B logging is asked for and cannot happen."""
    if importlib.util.find_spec("wandb") is None:
        raise ValueError(
            "logging.wandb=true needs the wandb package: pip install 'turnrl[wandb]' "
            "(or set logging.wandb=false)"
        )


def transcript(rec: dict[str, Any]) -> str:
    """A record's text with each sampled span marked ``[[...]]`` and its turn's advantage, so a
    W&B table cell shows which tokens were trained."""
    text, mask, adv = rec["text"], rec["mask"], rec["advantages"]
    out, i, n = [], 0, len(text)
    while i < n:
        j = i
        while j < n and mask[j] == mask[i]:
            j += 1
        span = "".join(text[i:j])
        if mask[i]:
            a = next((x for x in adv[i:j] if x is not None), None)
            tag = "" if a is None else f" A={a:+.2f}"
            out.append(f"[[{span}]]{tag}")
        else:
            out.append(span)
        i = j
    return "".join(out)


class WandbLogger:
    def __init__(self, run_dir: Path, project: str, config: dict[str, Any]) -> None:
        import wandb

        id_file = Path(run_dir) / "wandb-id.txt"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        self.wandb = wandb
        self.run = wandb.init(
            project=project,
            name=Path(run_dir).name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
        )

    def log(self, step: int, metrics: dict[str, Any], records: list[dict] = ()) -> None:
        data: dict[str, Any] = {
            k: v for k, v in metrics.items() if k != "step" and isinstance(v, int | float)
        }
        if records:
            table = self.wandb.Table(columns=COLUMNS)
            for r in records:
                table.add_data(
                    r["step"],
                    r["task"],
                    r["group"],
                    r["reward"],
                    r["advantage"],
                    r["end"],
                    " ".join(r["flags"]),
                    transcript(r),
                )
            data["trajectories"] = table
        self.run.log(data, step=step)

    def close(self) -> None:
        self.run.finish()
