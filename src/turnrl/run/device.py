"""What the machine's device means for a config: whether the model runs on CUDA, and the
precision training computes in. Read by preflight, the recipe, evaluation and the warm start of
a pretrained model (:mod:`turnrl.run.models`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from turnrl.policy.models import mixed_precision, runs_on_cuda

if TYPE_CHECKING:
    from turnrl.run.config import TrainConfig


def resolve_precision(cfg: TrainConfig) -> torch.dtype | None:
    """bf16 compute (``trainer.mixed_precision``; ``auto``: on CUDA only), or None for none:
    the trainer, the sampler and the SFT warm start autocast to it."""
    return mixed_precision(cfg.trainer.mixed_precision, cfg.model.device)


def on_cuda(cfg: TrainConfig) -> bool:
    return runs_on_cuda(cfg.model.device)
