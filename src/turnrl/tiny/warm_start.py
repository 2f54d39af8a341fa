"""The tiny model of a run: its tokenizer, architecture and warm start, cached by config.

``build_tiny`` trains a byte-level BPE on the env's own text, builds a few-million-parameter
Llama, and (with ``sft.enabled``) warm-starts it: an induction warm-up on copy rows when
``tiny.induction_steps`` > 0, then SFT on the env's scripted expert with the tiny terms
(:mod:`turnrl.tiny.sft`). The result is cached under ``$TURNRL_CACHE`` (default
``~/.cache/turnrl``) by everything that shapes it, so a second run with the same settings starts
at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaForCausalLM

from turnrl.chat import HermesToolCallParser
from turnrl.envs.registry import Family, env_fingerprint
from turnrl.envs.scripted import ScriptedEpisode
from turnrl.tiny.induction import induction_warmup
from turnrl.tiny.model import load_tokenizer, tiny_model, tool_call_tokens, train_tokenizer
from turnrl.tiny.sft import TinyTerms, value_mask
from turnrl.train.config import TrainConfig
from turnrl.train.setup import cache_root, demonstrations, train_demos
from turnrl.types import Task

CACHE_VERSION = 13  # bump when the warm start changes in a way the config does not show


def build_tiny(
    cfg: TrainConfig, family: Family, train_tasks: list[Task], run_dir: Path, log: Callable
) -> tuple[torch.nn.Module, Any]:
    """The run's starting tiny model and tokenizer: from ``run_dir/warm_start`` on resume,
    else from the warm-start cache or built now; saved to ``run_dir/warm_start`` (``run_dir/model``
    holds the latest trained policy)."""
    saved = run_dir / "warm_start"
    if (saved / "config.json").exists():  # resume: architecture + tokenizer of this run
        return LlamaForCausalLM.from_pretrained(saved), load_tokenizer(saved)
    model, tok = _cached_warm_start(cfg, family, train_tasks, log)
    model.save_pretrained(saved)
    tok.save_pretrained(saved)
    return model, tok


def cache_key(cfg: TrainConfig, family: Family) -> str:
    """Everything that shapes the warm start (eval settings never reach it)."""
    source = env_fingerprint(cfg.env.name, cfg.env.tasks)  # a user env's code and tasks file
    return hashlib.sha1(
        json.dumps(
            {
                **({"env_source": source} if source else {}),
                "model": cfg.model.model_dump(),
                "tiny": cfg.tiny.model_dump() if cfg.tiny is not None else None,
                "env": cfg.env.model_dump(exclude={"eval_tasks"}),
                "sft": cfg.sft.model_dump(),
                "seed": cfg.seed,
                "rollout": [
                    cfg.rollout.max_obs_tokens,
                    cfg.rollout.max_context_tokens,
                    cfg.rollout.max_turns,
                ],
                "v": CACHE_VERSION,
                **({"subagent": True} if cfg.subagent.enabled else {}),  # demos then delegate
            },
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:12]


def _cached_warm_start(
    cfg: TrainConfig, family: Family, train_tasks: list[Task], log: Callable
) -> tuple[torch.nn.Module, Any]:
    assert cfg.tiny is not None, "model.name=tiny always has a tiny section"
    cache = cache_root() / f"tiny-{family.name}-{cache_key(cfg, family)}"
    if (cache / "config.json").exists():
        log(f"warm start: cached SFT model {cache}")
        return LlamaForCausalLM.from_pretrained(cache), load_tokenizer(cache)
    t0 = time.monotonic()
    has_expert = callable(getattr(family, "expert", None))
    if has_expert:
        episodes = demonstrations(cfg, family, train_tasks)
        source = f"{len(episodes)} scripted episodes"
    elif cfg.sft.enabled:
        raise ValueError(f"sft.enabled: env {family.name!r} has no scripted expert to imitate")
    else:
        episodes = first_turns(family, train_tasks[: max(cfg.sft.episodes, 1)])
        source = f"the first turn of {len(episodes)} tasks (no scripted expert)"
    tok = env_tokenizer(episodes, cfg.tiny.vocab_size)
    log(f"warm start: tokenizer ({len(tok)} tokens) from {source} in {time.monotonic() - t0:.0f}s")
    model = tiny_model(
        tok,
        seed=cfg.seed,
        hidden_size=cfg.tiny.hidden_size,
        layers=cfg.tiny.layers,
        context=max(4096, cfg.rollout.max_context_tokens),
    )
    if cfg.sft.enabled:
        if cfg.tiny.induction_steps:
            t1 = time.monotonic()
            acc = induction_warmup(
                model,
                max_steps=cfg.tiny.induction_steps,
                seed=cfg.seed,
                log=lambda step, loss, acc: log(
                    f"  induction step {step} loss {loss:.3f} copy accuracy {acc:.3f}"
                ),
            )
            log(
                f"warm start: induction warm-up done in {time.monotonic() - t1:.0f}s "
                f"(copy accuracy {acc:.3f})"
            )
        tiny = cfg.tiny
        train_demos(
            cfg,
            episodes,
            model,
            tok,
            log,
            extra=lambda renderer, pairs: TinyTerms(
                [value_mask(d, ep.calls, renderer) for ep, d in pairs],
                tiny.value_weight,
                tiny.copy_rows,
            ),
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if cache.exists():  # another run cached the same warm start meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, cache)
    return model, tok


def env_tokenizer(episodes: list[ScriptedEpisode], vocab_size: int):
    """The tiny model's tokenizer, trained on the text of episodes: instructions, first
    messages, observations, the tool list and exactly the tool-call text the model will write.
    Episodes without calls (an env with no scripted expert) still give every tool's name and
    argument frames as single tokens."""
    parser = HermesToolCallParser()
    texts = []
    for ep in episodes:
        texts += [ep.instructions, ep.first_message] + ep.observations
        texts += [parser.format([c]) for c in ep.calls]
    # every tool any episode showed (an env may narrow the list per task, as the tools env does)
    tools = list({t["function"]["name"]: t for ep in episodes for t in ep.tools}.values())
    texts += [json.dumps(t["function"]) for t in tools]
    return train_tokenizer(texts, vocab_size=vocab_size, extra_tokens=tool_call_tokens(tools))


def first_turns(family: Family, tasks: list[Task]) -> list[ScriptedEpisode]:
    """For an env with no scripted expert: reset it on each task and keep what the model
    reads before its first action (instructions, first message, tool schemas)."""

    async def one(task: Task) -> ScriptedEpisode:
        env = family.make_env()
        try:
            first = await env.reset(task)
            return ScriptedEpisode(task, env.instructions, first, env.tool_schemas())
        finally:
            await env.close()

    async def all_() -> list[ScriptedEpisode]:
        gate = asyncio.Semaphore(16)

        async def gated(task: Task) -> ScriptedEpisode:
            async with gate:
                return await one(task)

        return list(await asyncio.gather(*(gated(t) for t in tasks)))

    return asyncio.run(all_())
