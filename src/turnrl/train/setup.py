"""Model set-up: a pretrained model (+ LoRA, + optional SFT warm start) or the tiny model.

The tiny model (``model.name=tiny``) is built and warm-started by :mod:`turnrl.tiny`; every
other name is loaded by :mod:`turnrl.policy.models`.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from turnrl.chat import ChatRenderer, check_template
from turnrl.envs.registry import Family
from turnrl.envs.scripted import ScriptedEpisode
from turnrl.policy.models import load_model, load_tokenizer
from turnrl.train.config import TrainConfig
from turnrl.train.export import tokenizer_source
from turnrl.train.sft import Demo, ExtraTerms, play_demonstrations, render_demo, sft_train
from turnrl.types import Task


def cache_root() -> Path:
    return Path(os.environ.get("TURNRL_CACHE", Path.home() / ".cache" / "turnrl"))


def build_model(
    cfg: TrainConfig,
    family: Family,
    train_tasks: list[Task],
    run_dir: Path,
    log: Callable[[str], None] = print,
) -> tuple[torch.nn.Module, Any]:
    """The starting policy and its tokenizer. On resume too it is the starting policy (the
    KL reference is copied from it); the checkpoint then restores what training changed."""
    if cfg.model.name == "tiny":
        from turnrl.tiny.warm_start import build_tiny

        return build_tiny(cfg, family, train_tasks, run_dir, log)
    m = cfg.model
    tok = load_tokenizer(tokenizer_source(run_dir, m.name), m.trust_remote_code)
    model = load_model(m.name, m.dtype, m.device, m.trust_remote_code)
    if cfg.model.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=cfg.model.lora_rank,
                lora_alpha=cfg.model.lora_alpha,
                target_modules=cfg.model.lora_targets,
                lora_dropout=0.0,
                task_type="CAUSAL_LM",
            ),
        )
    if cfg.sft.enabled and cfg.sft.episodes > 0:
        episodes = demonstrations(cfg, family, train_tasks)
        train_demos(cfg, episodes, model, tok, log)
    return model, tok


def demonstrations(cfg: TrainConfig, family: Family, train_tasks: list[Task]):
    """``sft.episodes`` episodes of the env's scripted expert (mistakes at rate ``sft.noise``)
    on training tasks drawn with the run's seed."""
    if not callable(getattr(family, "expert", None)):
        raise ValueError(f"sft.enabled: env {family.name!r} has no scripted expert to imitate")
    rng = random.Random(cfg.seed)
    tasks = [rng.choice(train_tasks) for _ in range(cfg.sft.episodes)]
    episodes = play_demonstrations(family, tasks, cfg.sft.noise, cfg.seed, cfg.rollout.max_turns)
    # with a subagent, the sub-episodes its scripted expert played teach that side too
    return episodes + getattr(family, "sub_demonstrations", list)()


def render_demos(
    cfg: TrainConfig, episodes: list[ScriptedEpisode], renderer: ChatRenderer
) -> list[tuple[ScriptedEpisode, Demo]]:
    """Each episode with its token-exact demonstration; those over the context budget are
    dropped."""
    out = []
    for ep in episodes:
        demo = render_demo(
            ep, renderer, ep.tools, cfg.rollout.max_obs_tokens, cfg.rollout.max_context_tokens
        )
        if demo is not None:
            out.append((ep, demo))
    return out


def train_demos(
    cfg: TrainConfig,
    episodes: list[ScriptedEpisode],
    model: torch.nn.Module,
    tok: Any,
    log: Callable[[str], None],
    extra: Callable[[ChatRenderer, list[tuple[ScriptedEpisode, Demo]]], ExtraTerms] | None = None,
) -> None:
    """SFT on ``episodes`` with the ``sft.*`` settings; ``extra`` builds added loss terms
    from the rendered demonstrations (the tiny lab's)."""
    t0 = time.monotonic()
    renderer = check_template(tok, cfg.model.tool_format, source=cfg.model.name)
    pairs = render_demos(cfg, episodes, renderer)
    demos = [d for _, d in pairs]
    log(
        f"warm start: SFT on {len(demos)} demonstrations ({sum(len(d.token_ids) for d in demos)} tokens)"
    )
    last = [0.0]

    def progress(epoch, i, total, loss):
        if i % 25 == 0 or i == total:
            last[0] = loss
            log(f"  sft step {i}/{total} loss {loss:.3f}")

    sft_train(
        model,
        demos,
        epochs=cfg.sft.epochs,
        lr=cfg.sft.lr,
        batch_size=cfg.sft.batch_size,
        pad_id=tok.pad_token_id,
        seed=cfg.seed,
        extra=extra(renderer, pairs) if extra is not None else None,
        log=progress,
    )
    log(f"warm start: SFT done in {time.monotonic() - t0:.0f}s (final loss {last[0]:.3f})")
