"""Checks that run before anything is written: a bad model path or env option fails as one
line naming the field, and leaves no run directory behind."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

from turnrl.envs.registry import Family, make_family
from turnrl.train.config import ConfigError, TrainConfig
from turnrl.types import Task

BUILTIN_MODELS = ("tiny", "smollm2")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # org/name
RUNS_DIR = "runs"  # the default runs_dir: runs/NAME is a run, never a hub id


class HubUnavailable(ConfigError):
    """A hub id that is neither in the local Hugging Face cache nor downloadable now."""


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
    local = local or Path(name).parts[0] == RUNS_DIR
    if local or not _HUB_ID.match(name):
        raise ConfigError(
            f"{field}: {name} is not a model directory (it does not exist); give a local "
            "directory with config.json, a hub id such as org/name, or one of: "
            + ", ".join(BUILTIN_MODELS)
        )
    # transformers would retry an unreachable hub for about a minute before failing
    host = hub_host()
    if not hub_cached(name) and host is None:
        raise HubUnavailable(
            f"{field}: {name} is not in the local Hugging Face cache and the hub cannot be "
            "reached (offline); download it while online, or give a local directory with "
            "config.json"
        )


def hub_cached(name: str) -> bool:
    """Whether the hub model ``name`` has its config in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def hub_host(timeout_s: float = 3.0) -> str | None:
    """The Hugging Face endpoint's host if a connection to it opens within ``timeout_s`` (or a
    proxy is set, which this check cannot see through); None when offline (``HF_HUB_OFFLINE``
    or no route)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return None
    url = urlparse(constants.ENDPOINT)
    host = url.hostname or "huggingface.co"
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return host
    try:
        socket.create_connection((host, url.port or 443), timeout=timeout_s).close()
    except OSError:
        return None
    return host


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
    if cfg.sft.enabled and cfg.sft.episodes > 0 and not callable(getattr(family, "expert", None)):
        # a family built from options (a TextArena game without a scripted expert) says so
        # only once built: still before anything is written
        family.close()
        raise ConfigError(
            f"sft.enabled: env {cfg.env.name} has no scripted expert to imitate with these "
            "env.options; set sft.enabled=false"
        )
    return family, train, held_out


def preflight(cfg: TrainConfig) -> tuple[Family, list[Task], list[Task]]:
    check_model(cfg.model.name)
    if cfg.rollout.backend == "vllm":
        from turnrl.policy.vllm import NEEDS, vllm_available

        if not vllm_available():
            raise ConfigError(f"rollout.backend: {NEEDS}")
    return env_tasks(cfg)
