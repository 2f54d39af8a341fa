"""The tiny-model lab: what makes a model trained from scratch learn on 2 CPU cores.

The tiny model is a registered model like any other (``model.name=tiny``,
:data:`turnrl.run.models.MODELS`): the default run (``turnrl train``) and the ``*-tiny`` recipes
in ``turnrl/recipes`` use it; a pretrained model needs none of this package.

- :mod:`~turnrl.tiny.model`: a byte-level BPE trained on the env's own text, a chat template
  without the system turn, and a few-million-parameter Llama;
- :mod:`~turnrl.tiny.warm_start`: builds the run's tokenizer and model (from the env's scripted
  expert, or from the env's first turns when it has none), warm-starts and caches them;
- :mod:`~turnrl.tiny.induction`: copy rows and the induction warm-up;
- :mod:`~turnrl.tiny.sft`: the value-weighted SFT loss and copy rows in every SFT step.

Its settings are the config's ``tiny`` section (:class:`TinyConfig`) and ``sft.*``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TinyConfig(BaseModel):
    """The tiny model trained from scratch (``model.name=tiny`` only; see :mod:`turnrl.tiny`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    vocab_size: int = Field(2048, ge=256)  # byte-level BPE trained on the env's text
    hidden_size: int = Field(128, ge=32)
    layers: int = Field(4, ge=1)
    value_weight: float = Field(3.0, ge=0)  # SFT: extra loss weight on tool-argument values
    # copying by induction (turnrl.tiny.induction): warm up on copy rows for at most this many
    # steps (0: none), then mix copy_rows of them into every SFT step so the circuit survives it
    induction_steps: int = Field(0, ge=0)
    copy_rows: int = Field(0, ge=0)


def build(cfg: Any, family: Any, train_tasks: list, run_dir: Path, log: Any) -> tuple[Any, Any]:
    """The run's starting tiny model and tokenizer (:func:`turnrl.tiny.warm_start.build_tiny`;
    imported here on use: torch and transformers load only when a tiny model is built)."""
    from turnrl.tiny.warm_start import build_tiny

    return build_tiny(cfg, family, train_tasks, run_dir, log)
