"""Checkpoints, each written to a temporary file and renamed, so a kill or a full disk at any
moment leaves the previous good one.

A run directory's ``checkpoints/`` holds ``last.pt`` (what ``--resume`` continues from),
``best.pt`` (the best held-out success so far) and ``step-NNNNNN.pt`` every
``checkpoint_keep_every`` steps, of which the newest ``checkpoint_keep`` are kept.

Under torch.distributed the file is the same: the full state, gathered on rank 0 (which alone
writes), plus every rank's random state; so a run resumes on any number of processes.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from turnrl.train.parallel import Dist


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Only what training changes (all weights, or just the LoRA adapters)."""
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k in names}


def save_checkpoint(
    path: Path,
    *,
    step: int,
    version: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    critic: torch.nn.Module | None = None,
    extra: dict[str, Any] | None = None,
    dist: Dist | None = None,
) -> None:
    """Everything a resume needs; ``critic`` (gae_turn's value head, whose Adam moments live in
    ``optimizer``) is saved beside the policy. With ``dist`` every rank calls it (gathering the
    state is collective) and rank 0 writes."""
    rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
    state = {
        "step": step,
        "version": version,
        "model": trainable_state(model) if dist is None else dist.full_state(model),
        "optimizer": optimizer.state_dict()
        if dist is None
        else dist.optimizer_state(model, optimizer),
        "critic": None if critic is None else critic.state_dict(),
        "rng": rng,
        "rng_ranks": [rng] if dist is None else dist.rng_states(),
        "extra": extra or {},
    }
    if dist is not None and not dist.main:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(state, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError
        tmp.unlink(missing_ok=True)
        raise CheckpointError(path, e) from None
    os.replace(tmp, path)


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (disk full, no permission); the previous file at
    ``path`` is untouched."""

    def __init__(self, path: Path, cause: BaseException) -> None:
        free = shutil.disk_usage(path.parent).free / 2**20
        text = re.sub(r"^\[enforce fail at [^\]]*\][\s.]*", "", str(cause).strip())  # torch's
        first = text.splitlines()[-1][:200] if text else type(cause).__name__
        kept = f"{path.name} is intact" if path.exists() else f"no {path.name} was written yet"
        super().__init__(
            f"could not write checkpoint {path} ({first}; {free:.0f} MiB free); {kept}"
        )
        self.path = path


def keep_copy(last: Path, step: int, keep: int) -> Path:
    """Keep ``last`` as ``step-NNNNNN.pt`` beside it (a hard link where possible, so no second
    copy on disk) and delete the oldest such files beyond ``keep``."""
    target = last.with_name(f"step-{step:06d}.pt")
    target.unlink(missing_ok=True)
    try:
        os.link(last, target)
    except OSError:
        shutil.copyfile(last, target)
    for old in sorted(last.parent.glob("step-*.pt"))[:-keep]:
        old.unlink()
    return target


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    critic: torch.nn.Module | None = None,
    dist: Dist | None = None,
) -> dict[str, Any]:
    """Restore ``path`` into the model, optimizer (and critic) and the random state; under
    torch.distributed each rank its own random state when the world size is the one saved."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    if critic is not None:
        saved = state.get("critic")
        assert saved is not None, f"{path} holds no critic, but this run trains one (gae_turn)"
        critic.load_state_dict(saved)
    if dist is not None:
        dist.load_state(model, optimizer, state)
    else:
        missing = model.load_state_dict(state["model"], strict=False)
        assert not missing.unexpected_keys, (
            f"checkpoint has unknown weights: {missing.unexpected_keys[:5]}"
        )
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    rng = state["rng"]
    ranks = state.get("rng_ranks") or []
    if dist is not None and len(ranks) == dist.world:
        rng = ranks[dist.rank]
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    return state
