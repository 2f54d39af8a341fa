"""Checks that touch the machine, run when a command starts and before anything is written.

Config validation (:mod:`turnrl.run.config`) checks values only, so a saved ``config.yaml``
loads anywhere; what depends on this machine is checked here: the env's import path (and the
directory it was imported from), ``env.tasks``, model directories and hub ids, CUDA devices, the
vLLM engine, the processes torchrun started, and the rubric's functions. Every problem is one
line naming its field; they are reported together as one :class:`ConfigError`, and leave no run
directory behind.

What a run must find again from any working directory is recorded in its config: an entry
point as the import path it points to, a module found in the working directory with that
directory (``env.path``), files and model directories by absolute path.
"""

from __future__ import annotations

import importlib
import os
import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

import torch

from turnrl.envs.registry import (
    Family,
    has_expert,
    make_family,
    resolve_env_name,
    supplies_tasks,
)
from turnrl.envs.task_files import check_tasks_source
from turnrl.rewards.pipeline import load_function
from turnrl.run.config import ConfigError, TrainConfig, load_config
from turnrl.run.device import on_cuda
from turnrl.run.models import MODELS, named_model
from turnrl.types import Task

BUILTIN_MODELS = tuple(MODELS)
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


def env_tasks(cfg: TrainConfig, *, train: bool = True) -> tuple[Family, list[Task], list[Task]]:
    """The env family and its train (``train``: else none) / held-out tasks; a bad
    ``env.options`` value (or a task source it names) raises ConfigError."""
    try:
        family = make_family(cfg.env.name, cfg.env.options, cfg.env.tasks)
        tasks = family.tasks("train", cfg.env.train_tasks, seed=cfg.seed) if train else []
        held_out = family.tasks("test", cfg.env.eval_tasks, seed=cfg.seed)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as e:
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        raise ConfigError(text if text.startswith("env") else f"env.options: {text}") from None
    return family, tasks, held_out


def find_env(cfg: TrainConfig) -> None:
    """Resolve ``env.name`` to what the run records (a shipped name, or an import path) and,
    for a module found in the working directory, record that directory in ``env.path``, so
    ``eval``, ``--resume`` and ``export`` import it from anywhere. Raises ConfigError."""
    if cfg.env.path is not None and cfg.env.path not in sys.path:
        sys.path.insert(0, cfg.env.path)
    try:
        name = resolve_env_name(cfg.env.name)
    except ValueError as e:
        raise ConfigError(f"env.name: {e}") from None
    cfg.env.name = name
    if ":" in name and cfg.env.path is None:
        root = _import_root(name.partition(":")[0])
        if root is not None and root == Path.cwd().resolve():
            cfg.env.path = str(root)


def _import_root(module_name: str) -> Path | None:
    """The sys.path entry ``module_name`` was imported from (None for a built-in module)."""
    module = importlib.import_module(module_name)
    file = getattr(module, "__file__", None)
    if file is None:
        return None
    depth = module_name.count(".") + (1 if Path(file).name == "__init__.py" else 0)
    return Path(file).resolve().parents[depth]


def _absolute_dir(value: str) -> str:
    """A local directory as its absolute path; anything else (a name, a hub id) as it is."""
    path = Path(value).expanduser()
    return str(path.resolve()) if path.is_dir() else value


def check_device(device: str) -> str | None:
    """What is wrong with ``model.device`` on this machine, or None."""
    if not device.startswith("cuda"):
        return None
    if not torch.cuda.is_available():
        return f"model.device: {device} asked for, but no CUDA device is visible"
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return (
            f"model.device: {device}, but only {torch.cuda.device_count()} CUDA device(s) are "
            "visible"
        )
    return None


def check_machine(cfg: TrainConfig, *, training: bool = True) -> None:
    """Every check of ``cfg`` against this machine (see the module docstring); records what a
    run needs to travel (``env.name``, ``env.path``, absolute paths) in ``cfg``. ``training``:
    also what only training needs (the scripted expert for SFT, the trainer's processes).
    Raises one ConfigError listing every problem."""
    from turnrl.train.parallel import launched_world

    problems: list[str] = []

    def check(fn, *args) -> None:
        try:
            fn(*args)
        except ConfigError as e:
            problems.extend(str(e).splitlines())

    check(find_env, cfg)
    env_found = not problems
    if env_found and cfg.env.tasks is not None:
        try:
            cfg.env.tasks = check_tasks_source(cfg.env.tasks)
        except (ValueError, OSError) as e:
            problems.extend(f"env.tasks: {line}" for line in str(e).splitlines())
    elif env_found and not supplies_tasks(cfg.env.name):
        problems.append(
            f"env.tasks: {cfg.env.name} supplies no tasks; set env.tasks=FILE.jsonl or give "
            "the class a classmethod tasks(split, n, seed)"
        )
    if training and env_found and cfg.sft.enabled and cfg.sft.episodes > 0:
        if not has_expert(cfg.env.name):
            problems.append(
                f"sft.enabled: env {cfg.env.name} has no expert to demonstrate; set "
                "sft.enabled=false (or give it expert(task, seed, noise))"
            )
    check(check_model, cfg.model.name)
    cfg.model.name = _absolute_dir(cfg.model.name)
    if problem := check_device(cfg.model.device):
        problems.append(problem)
    summarizer = cfg.rollout.summarizer
    if summarizer not in (None, "smollm2"):
        if not Path(summarizer).expanduser().is_dir():
            problems.append(f"rollout.summarizer={summarizer!r}: no such model directory")
        else:
            cfg.rollout.summarizer = _absolute_dir(summarizer)
    sub = cfg.subagent.model
    if isinstance(sub, str) and sub not in ("snapshot", "smollm2"):
        if not (Path(sub).expanduser() / "config.json").is_file():
            problems.append(
                f"subagent.model: {sub} is not a model directory (no config.json); give "
                "snapshot, smollm2, a local model directory or an endpoint {base_url, model}"
            )
        else:
            cfg.subagent.model = _absolute_dir(sub)
    bad = []
    for path in cfg.reward.functions:
        try:
            load_function(path)
        except ValueError as e:
            bad.append(str(e))
    if bad:
        problems.append("reward.functions: " + "; ".join(bad))
    if cfg.rollout.sampler == "vllm":
        from turnrl.policy.vllm import NEEDS, vllm_available

        if not vllm_available():
            problems.append(f"rollout.sampler: {NEEDS}")
    if training:
        problems += check_trainer(cfg, launched_world())
    if problems:
        raise ConfigError("\n".join(problems))


def checked_config(
    config_file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TrainConfig:
    """:func:`turnrl.run.config.load_config` then :func:`check_machine`: what ``turnrl train``
    checks before any work (a ConfigError from either)."""
    cfg = load_config(config_file, list(overrides))
    check_machine(cfg)
    return cfg


def preflight(cfg: TrainConfig) -> tuple[Family, list[Task], list[Task]]:
    """Before a run starts: :func:`check_machine`, then the env family and its tasks."""
    check_machine(cfg)
    family, train, held_out = env_tasks(cfg)
    if cfg.sft.enabled and cfg.sft.episodes > 0 and not callable(getattr(family, "expert", None)):
        # a family built from options (a TextArena game without a scripted expert) says so
        # only once built: still before anything is written
        family.close()
        raise ConfigError(
            f"sft.enabled: env {cfg.env.name} has no scripted expert to imitate with these "
            "env.options; set sft.enabled=false"
        )
    return family, train, held_out


# -- the trainer's processes (torchrun) ------------------------------------------------------


def resolve_strategy(cfg: TrainConfig, world: int) -> str:
    """``trainer.strategy``; ``auto`` is none on one process, else FSDP2 on CUDA, DDP on CPU.
    DDP over one process is none (FSDP2 over one still shards nothing but casts and keeps
    float32 master weights)."""
    s = cfg.trainer.strategy
    if world == 1 and s in ("auto", "ddp"):
        return "none"
    if s != "auto":
        return s
    return "fsdp2" if on_cuda(cfg) else "ddp"


def check_trainer(cfg: TrainConfig, world: int) -> list[str]:
    """What this many processes cannot train (one line each)."""
    problems = []
    strategy = resolve_strategy(cfg, world)
    where = f"with {world} processes (WORLD_SIZE={world})"
    if world > 1 and strategy == "none":
        problems.append(f"trainer.strategy=none {where}: choose ddp or fsdp2 (or auto)")
    if world > 1 and cfg.rollout.sampler == "vllm":
        problems.append(f"rollout.sampler=vllm {where}: one trainer process only (use hf)")
    if strategy == "fsdp2" and cfg.algo.advantage == "gae_turn":
        problems.append(
            "trainer.strategy=fsdp2 with algo.advantage=gae_turn: the critic's value head is not "
            "sharded; use trainer.strategy=ddp"
        )
    if strategy == "fsdp2" and not _shardable(cfg):
        problems.append(
            f"trainer.strategy=fsdp2: model {cfg.model.name} declares no transformer blocks "
            "(_no_split_modules) to shard; use trainer.strategy=ddp"
        )
    return problems


def _shardable(cfg: TrainConfig) -> bool:
    """Whether the model class names its blocks; decided from its config, no weights loaded."""
    if named_model(cfg.model.name).from_scratch:
        return True  # a LlamaForCausalLM
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        from turnrl.policy.models import model_source

        path, kwargs = model_source(cfg.model.name)
        config = AutoConfig.from_pretrained(
            path, trust_remote_code=cfg.model.trust_remote_code, **kwargs
        )
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except Exception:  # a model only loading can tell about: decided when it is wrapped
        return True
    return bool(getattr(cls, "_no_split_modules", None))
