"""Checkpoints: one file, replaced atomically, so a kill at any moment leaves the last good one."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import torch


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
) -> None:
    """Everything a resume needs; ``critic`` (gae_turn's value head, whose Adam moments live in
    ``optimizer``) is saved beside the policy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "version": version,
        "model": trainable_state(model),
        "optimizer": optimizer.state_dict(),
        "critic": None if critic is None else critic.state_dict(),
        "rng": {"python": random.getstate(), "torch": torch.get_rng_state()},
        "extra": extra or {},
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    critic: torch.nn.Module | None = None,
) -> dict[str, Any]:
    state = torch.load(path, map_location="cpu", weights_only=False)
    if critic is not None:
        saved = state.get("critic")
        assert saved is not None, f"{path} holds no critic, but this run trains one (gae_turn)"
        critic.load_state_dict(saved)
    missing = model.load_state_dict(state["model"], strict=False)
    assert not missing.unexpected_keys, (
        f"checkpoint has unknown weights: {missing.unexpected_keys[:5]}"
    )
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    random.setstate(state["rng"]["python"])
    torch.set_rng_state(state["rng"]["torch"])
    return state
