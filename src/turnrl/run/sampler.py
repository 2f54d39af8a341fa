"""How the trainer's weights reach the vLLM sampler (``rollout.sampler=vllm``).

The engine starts holding the trainer's current weights and gets a push every ``sync_every``
optimizer steps (and before each held-out evaluation); between pushes it samples with the
weights of its last push, and every token it samples records that version, so the loss's
importance weights (``algo.is_correction``) and the ``vllm/staleness_*`` metrics see the lag.
A push is the full state dict (LoRA merged) or, for ``model.lora`` with
``rollout.vllm_lora=adapter``, the adapter alone, saved under ``run_dir/vllm/adapters``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from turnrl.policy.base import PolicyBackend
from turnrl.policy.hf import HFPolicy
from turnrl.run.config import TrainConfig
from turnrl.train.export import saved_policy
from turnrl.types import Trajectory


def sampler_of(
    cfg: TrainConfig, run_dir: Path, model: torch.nn.Module, policy: HFPolicy
) -> PolicyBackend:
    """What samples the rollouts: the trainer's own model (``hf``) or a vLLM engine."""
    return policy if cfg.rollout.sampler == "hf" else vllm_sampler(cfg, run_dir, model, policy)


def after_update(
    cfg: TrainConfig,
    run_dir: Path,
    sampler: PolicyBackend,
    policy: HFPolicy,
    model: torch.nn.Module,
    trajs: list[Trajectory],
    evaluating: bool,
) -> dict[str, float]:
    """After an update to ``policy.version``: push the weights to vLLM every ``sync_every``
    versions and before a held-out evaluation (which always sees the trainer's current weights);
    returns how far the trained tokens lagged (nothing for ``hf``, which is always current)."""
    if sampler is policy:
        return {}
    if policy.version - sampler.version >= cfg.sync_every or evaluating:
        push_weights(cfg, run_dir, sampler, model, policy.version)
    return sampler_lag(trajs, policy.version - 1)


def vllm_sampler(cfg: TrainConfig, run_dir: Path, model: torch.nn.Module, policy: HFPolicy):
    """A vLLM engine holding the trainer's current weights as version ``policy.version``.

    It starts from the run's saved policy (``run_dir/model``), or for LoRA adapters from the
    frozen base (``run_dir/vllm/base``), then receives one push: ``run_dir/model`` may lag a
    resumed checkpoint (a kill between the two writes) and the base holds no adapter."""
    from turnrl.policy.vllm import VLLMPolicy, save_base

    kwargs: dict[str, Any] = dict(
        dtype="auto" if cfg.model.dtype == "auto" else cfg.model.dtype,
        gpu_memory_utilization=cfg.rollout.vllm_gpu_memory,
        max_model_len=cfg.rollout.max_context_tokens,
        seed=cfg.seed,
    )
    saved = str(saved_policy(run_dir))
    if pushes_adapters(cfg, model):
        base = save_base(model, run_dir / "vllm" / "base")
        engine = VLLMPolicy(str(base), tokenizer=saved, lora_rank=cfg.model.lora_rank, **kwargs)
    else:
        engine = VLLMPolicy(saved, **kwargs)
    push_weights(cfg, run_dir, engine, model, policy.version)
    return engine


def pushes_adapters(cfg: TrainConfig, model: torch.nn.Module) -> bool:
    from turnrl.train.export import is_lora

    return is_lora(model) and cfg.rollout.vllm_lora == "adapter"


def push_weights(cfg: TrainConfig, run_dir: Path, engine, model: torch.nn.Module, version: int):
    """Hand the trainer's weights to vLLM as ``version``: the LoRA adapter saved to
    ``run_dir/vllm/adapters/v{version}``, or the full (LoRA-merged) state dict."""
    if pushes_adapters(cfg, model):
        from turnrl.policy.vllm import save_adapter

        engine.load_adapter(save_adapter(model, run_dir / "vllm" / "adapters", version), version)
    else:
        engine.load_weights(trainer_weights(model), version)


def trainer_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trainer's weights under transformers' names, LoRA merged (what vLLM loads)."""
    from turnrl.train.export import is_lora, merged_state_dict

    return merged_state_dict(model)[1] if is_lora(model) else model.state_dict()


def sampler_lag(trajs: list, version: int) -> dict[str, float]:
    """How many versions the sampled tokens trail ``version`` (the trainer's before this
    update): 0 with every push, up to sync_every - 1 between pushes."""
    lags = [version - v for t in trajs for v in t.policy_versions if v >= 0]
    return {
        "vllm/staleness_mean": sum(lags) / max(len(lags), 1),
        "vllm/staleness_max": float(max(lags, default=0)),
    }
