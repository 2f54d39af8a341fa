"""Checks that run before anything is written: a bad model path or env option fails as one
line naming the field, and leaves no run directory behind."""

from __future__ import annotations

import re
from pathlib import Path

from turnrl.envs.registry import Family, make_family
from turnrl.train.config import ConfigError, TrainConfig
from turnrl.types import Task

BUILTIN_MODELS = ("tiny", "smollm2")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # org/name


def check_model(name: str, field: str = "model.name") -> None:
    """A model name must be built in, a directory with a transformers ``config.json``, or
    look like a hub id (``org/name``, which transformers resolves and may download)."""
    if name in BUILTIN_MODELS:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ConfigError(
                f"{field}: {name} has no config.json; give a directory written by "
                "save_pretrained, or one of: " + ", ".join(BUILTIN_MODELS)
            )
        return
    # org/name is a hub id unless its first part is a local directory (runs/NAME mistyped)
    local = path.exists() or path.parent.is_dir() or name.startswith((".", "~", "/"))
    if local or not _HUB_ID.match(name):
        raise ConfigError(
            f"{field}: {name} is not a model directory (it does not exist); give a local "
            "directory with config.json, a hub id such as org/name, or one of: "
            + ", ".join(BUILTIN_MODELS)
        )


def env_tasks(cfg: TrainConfig) -> tuple[Family, list[Task], list[Task]]:
    """The env family and its train / held-out tasks; a bad ``env.options`` value (or a task
    source it names) raises ConfigError."""
    try:
        family = make_family(cfg.env.name, cfg.env.options, cfg.env.tasks)
        train = family.tasks("train", cfg.env.train_tasks, seed=cfg.seed)
        held_out = family.tasks("test", cfg.env.eval_tasks, seed=cfg.seed)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as e:
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        raise ConfigError(text if text.startswith("env") else f"env.options: {text}") from None
    return family, train, held_out


def preflight(cfg: TrainConfig) -> tuple[Family, list[Task], list[Task]]:
    check_model(cfg.model.name)
    if cfg.rollout.backend == "vllm":
        from turnrl.policy.vllm import NEEDS, vllm_available

        if not vllm_available():
            raise ConfigError(f"rollout.backend: {NEEDS}")
    return env_tasks(cfg)
