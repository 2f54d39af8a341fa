"""What the machine's device means for a config: whether the model runs on CUDA, and the
precision training computes in. Read by preflight, the recipe, evaluation and the warm start of
a pretrained model (:mod:`turnrl.run.models`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from turnrl.run.config import TrainConfig


def resolve_precision(cfg: TrainConfig) -> torch.dtype | None:
    """bf16 compute (``trainer.mixed_precision``; ``auto``: on CUDA only), or None for none."""
    mp = cfg.trainer.mixed_precision
    if mp == "auto":
        return torch.bfloat16 if on_cuda(cfg) else None
    return torch.bfloat16 if mp == "bf16" else None


def on_cuda(cfg: TrainConfig) -> bool:
    device = cfg.model.device
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
