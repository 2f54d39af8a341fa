"""The run directory: everything a run writes, and the commands that read it back.

``runs/NAME/`` holds ``config.yaml`` (every key, as validated and as preflight recorded it, so
the run travels: ``eval``, ``--resume`` and ``export`` work from any directory and machine),
``metrics.jsonl`` and TensorBoard events, ``checkpoints/`` (``last.pt``, ``best.pt``,
``step-N.pt``), the latest policy as a transformers model (``model/``), trajectory records
(``trajectories/``, ``episodes.jsonl``) and ``report.html``.

Under torchrun rank 0 alone writes; checkpoints are saved collectively (FSDP2 gathers the state)
and written by rank 0.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from turnrl.chat import ChatRenderer
from turnrl.run.config import TrainConfig, load_config
from turnrl.train.batch import Batch
from turnrl.train.checkpoint import keep_copy, load_checkpoint, save_checkpoint
from turnrl.train.export import save_policy, saved_policy, write_policy
from turnrl.train.metrics import MetricsWriter, count_resume
from turnrl.train.parallel import Dist
from turnrl.types import Task, Trajectory
from turnrl.view.data import AUDIT_NAME, find_runs, is_run, read_audit_c
from turnrl.view.export import export_html
from turnrl.view.records import RecordWriter
from turnrl.view.server import make_server
from turnrl.view.wandb_log import WandbLogger

__all__ = [
    "AUDIT_NAME",
    "RunDir",
    "export_html",
    "export_run",
    "find_runs",
    "is_run",
    "make_server",
    "read_audit_c",
]

Log = Callable[[str], None]


def new_run_dir(cfg: TrainConfig) -> Path:
    """``runs_dir/name``, or with a time and config digest suffix when that exists."""
    base = Path(cfg.runs_dir) / cfg.name
    if not base.exists():
        return base
    digest = hashlib.sha1(json.dumps(cfg.model_dump(), sort_keys=True).encode()).hexdigest()[:6]
    return Path(cfg.runs_dir) / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"


class RunDir:
    """One run's directory and its writers (on rank 0; the other ranks only join collectives)."""

    def __init__(self, cfg: TrainConfig, resume_dir: Path | None, d: Dist, log: Log) -> None:
        self.cfg, self.d, self.log, self.resuming = cfg, d, log, resume_dir is not None
        self.path: Path = d.agree(resume_dir or new_run_dir(cfg))
        self.ckpt = self.path / "checkpoints" / "last.pt"
        self.saved = 0  # the step of checkpoints/last.pt
        self.resumes = 0
        self.writer: MetricsWriter | None = None
        self.records: RecordWriter | None = None
        self.wandb: WandbLogger | None = None
        if d.main:
            self.path.mkdir(parents=True, exist_ok=True)
            log(f"run directory: {self.path}  (resume: turnrl train --resume {self.path})")
            (self.path / "config.yaml").write_text(
                yaml.safe_dump(cfg.model_dump(), sort_keys=False)
            )

    def resume(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, critic: Any
    ) -> tuple[int, int]:
        """(step, policy version) of ``checkpoints/last.pt`` restored into the model, optimizer
        and critic; (0, 0) for a new run or a resume before the first checkpoint."""
        if not self.resuming:
            return 0, 0
        self.resumes = self.d.agree(count_resume(self.path) if self.d.main else 0)
        if not self.ckpt.exists():
            return 0, 0
        state = load_checkpoint(self.ckpt, model, optimizer, critic=critic, dist=self.d)
        self.saved = state["step"]
        self.log(f"resumed {self.path} at step {self.saved}")
        return state["step"], state["version"]

    def start(
        self, full: torch.nn.Module, tokenizer: Any, start_step: int, train_tasks: list[Task]
    ) -> None:
        """Save the starting policy of a fresh run and open the writers (rank 0)."""
        if not self.d.main:
            return
        if saved_policy(self.path) is None:
            save_policy(self.path, full, tokenizer, self.cfg.model.name, start_step)
        self.writer = MetricsWriter(self.path, resume_step=start_step if self.resuming else None)
        self.records = RecordWriter(
            self.path,
            record_groups=self.cfg.logging.record_groups,
            records_mb=self.cfg.logging.records_mb,
            token_text=lambda i: tokenizer.decode([i]),
            tiers={t.id: t.payload.get("tier") for t in train_tasks},
            truncate_from=start_step,
        )
        if self.cfg.logging.wandb:
            self.wandb = WandbLogger(
                self.path, self.cfg.logging.wandb_project, self.cfg.model_dump()
            )

    def has_eval(self, step: int) -> bool:
        return self.d.agree(self.d.main and self.writer is not None and self.writer.has_eval(step))

    def write_eval(
        self, step: int, metrics: dict[str, float], trajs: list[Trajectory], renderer: ChatRenderer
    ) -> float:
        """Log a held-out evaluation; returns the best eval success before it."""
        assert self.writer is not None
        best = self.writer.best_eval()
        self.writer.write_eval(step, metrics, trajs[:3], renderer)
        if self.wandb is not None:
            self.wandb.log(step, metrics)
        return best

    def write_step(
        self,
        step: int,
        metrics: dict[str, float],
        trajs: list[Trajectory],
        batch: Batch,
        per_token: dict[str, torch.Tensor],
        renderer: ChatRenderer,
    ) -> None:
        """A training step's metrics row, samples and trajectory records (rank 0)."""
        if not self.d.main:
            return
        assert self.writer is not None and self.records is not None
        self.writer.write(metrics, trajs[:2], renderer)
        if len(batch.episode_row) > len(trajs):  # segment rows back to episodes
            per_token = {k: batch.per_episode(v) for k, v in per_token.items()}
        recorded = self.records.write(step, trajs, per_token)
        if self.wandb is not None:
            self.wandb.log(step, metrics, recorded)

    def checkpoint(
        self,
        step: int,
        version: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        critic: Any,
        full: torch.nn.Module,
        tokenizer: Any,
    ) -> None:
        """``checkpoints/last.pt`` (+ ``step-N.pt``) and ``model/`` when due after ``step``."""
        cfg = self.cfg
        keep = cfg.checkpoint_keep_every and step % cfg.checkpoint_keep_every == 0
        if not (keep or step % cfg.checkpoint_every == 0 or step == cfg.steps):
            return
        save_checkpoint(
            self.ckpt,
            step=step,
            version=version,
            model=model,
            optimizer=optimizer,
            critic=critic,
            dist=self.d,
        )
        self.saved = step
        if self.d.main:
            save_policy(self.path, full, tokenizer, cfg.model.name, step)
            if keep:
                keep_copy(self.ckpt, step, cfg.checkpoint_keep)

    def save_best(
        self,
        step: int,
        version: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        success: float,
    ) -> None:
        """``checkpoints/best.pt``: the best held-out success so far (collective under FSDP2)."""
        save_checkpoint(
            self.ckpt.with_name("best.pt"),
            step=step,
            version=version,
            model=model,
            optimizer=optimizer,
            extra={"eval/success": success},
            dist=self.d,
        )

    def resume_note(self) -> str:
        """What to run to go on after an interruption."""
        if self.saved:
            return (
                f"the last checkpoint is step {self.saved} of {self.cfg.steps}; continue with: "
                f"turnrl train --resume {self.path}"
            )
        return f"no checkpoint yet; start over with: turnrl train --resume {self.path}"

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.close()

    def report(self) -> Path | None:
        """``report.html``, the viewer's self-contained export of the run (rank 0)."""
        return export_html([self.path], self.path / "report.html") if self.d.main else None


def run_config(run_dir: Path, overrides: list[str]) -> tuple[TrainConfig, str | None]:
    """``run_dir``'s saved config with ``overrides``, and a note when its ``model.device`` is
    not on this machine and was replaced by ``auto`` (no override named a device)."""
    from turnrl.run.preflight import check_device

    cfg = load_config(run_dir / "config.yaml", overrides, saved=True)
    picked = any(o.partition("=")[0] == "model.device" for o in overrides)
    if picked or check_device(cfg.model.device) is None:
        return cfg, None
    saved, cfg.model.device = cfg.model.device, "auto"
    return cfg, f"note: model.device {saved} (saved by the run) is not on this machine; using auto"


def export_run(run_dir: Path, out: Path, cfg: TrainConfig) -> Path:
    """Write ``run_dir``'s latest policy to ``out`` as a save_pretrained directory.

    A run with a saved policy is copied as it is; an older run (warm start in ``model``,
    trained weights only in ``checkpoints/last.pt``) is rebuilt from those on the CPU and
    written."""
    saved = saved_policy(run_dir)
    if saved is not None:
        shutil.copytree(saved, out)
        return out
    from turnrl.run.evaluate import load_policy

    cpu = cfg.model_copy(update={"model": cfg.model.model_copy(update={"device": "cpu"})})
    model, tok = load_policy(cpu, run_dir)
    return write_policy(out, model, tok, cfg.model.name, step=-1, adapter_out=None)
