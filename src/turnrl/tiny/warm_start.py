"""The tiny model of a run: its tokenizer, architecture and warm start, cached by config.

``build_tiny`` trains a byte-level BPE on the env's own text, builds a few-million-parameter
Llama, and (with ``sft.enabled``) warm-starts it: an induction warm-up on copy rows when
``tiny.induction_steps`` > 0, then SFT on the env's scripted expert with the tiny terms
(:mod:`turnrl.tiny.sft`). The result is cached under ``$TURNRL_CACHE`` (default
``~/.cache/turnrl``) by everything that shapes it, so a second run with the same settings starts
at once.

An unfinished warm start keeps its work beside that entry, in ``<entry>.partial/``: the
demonstrations, the tokenizer and the warm-up's and SFT's checkpoints. Any run with the same
settings (``--resume`` of the interrupted run, or a new one) continues from there; the entry
itself appears only complete, by a rename, so the cache never holds a half-trained model.
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
from typing import TYPE_CHECKING, Any

import torch
from transformers import LlamaForCausalLM

from turnrl.chat import HermesToolCallParser
from turnrl.envs.registry import Family, env_fingerprint
from turnrl.envs.scripted import ScriptedEpisode
from turnrl.tiny.induction import induction_warmup
from turnrl.tiny.model import load_tokenizer, tiny_model, tool_call_tokens, train_tokenizer
from turnrl.tiny.sft import TinyTerms, value_mask
from turnrl.train.metrics import clock
from turnrl.train.sft import cache_root, demonstrations, train_demos
from turnrl.types import Task

if TYPE_CHECKING:
    from turnrl.run.config import TrainConfig

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
    shutil.rmtree(saved, ignore_errors=True)  # a copy a kill cut short
    save_atomic(saved, model, tok)
    return model, tok


def save_atomic(path: Path, model: torch.nn.Module | None, tok: Any) -> None:
    """``save_pretrained`` into a temporary folder renamed to ``path``: a kill leaves no
    ``config.json`` beside missing weights. If ``path`` appeared meanwhile (another run with
    the same settings finished first), that one is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if model is not None:
        model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, path)
    except OSError:  # path exists and is not empty
        shutil.rmtree(tmp, ignore_errors=True)


def cache_key(cfg: TrainConfig, family: Family) -> str:
    """Everything that shapes the warm start (eval settings never reach it)."""
    source = env_fingerprint(cfg.env.name, cfg.env.tasks)  # a user env's code and tasks file
    return hashlib.sha1(
        json.dumps(
            {
                **({"env_source": source} if source else {}),
                "model": cfg.model.model_dump(),
                "tiny": cfg.tiny.model_dump() if cfg.tiny is not None else None,
                "env": cfg.env.model_dump(exclude={"eval_tasks", "path"}),
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
    work = cache.with_name(cache.name + ".partial")
    if work.exists():
        log(f"warm start: continuing the unfinished one in {work} (delete it to start over)")
    has_expert = callable(getattr(family, "expert", None))
    if has_expert:
        episodes = demonstrations(cfg, family, train_tasks, log, saved=work / "episodes.pkl")
        source = f"{len(episodes)} scripted episodes"
    elif cfg.sft.enabled:
        raise ValueError(f"sft.enabled: env {family.name!r} has no scripted expert to imitate")
    else:
        episodes = first_turns(family, train_tasks[: max(cfg.sft.episodes, 1)])
        source = f"the first turn of {len(episodes)} tasks (no scripted expert)"
    if (work / "tokenizer" / "tokenizer.json").exists():  # the one the checkpoints' ids use
        tok = load_tokenizer(work / "tokenizer")
    else:
        t0 = time.monotonic()
        tok = env_tokenizer(episodes, cfg.tiny.vocab_size)
        save_atomic(work / "tokenizer", None, tok)
        took = clock(time.monotonic() - t0)
        log(f"warm start: tokenizer ({len(tok)} tokens) from {source} in {took}")
    model = tiny_model(
        tok,
        seed=cfg.seed,
        hidden_size=cfg.tiny.hidden_size,
        layers=cfg.tiny.layers,
        context=max(4096, cfg.rollout.max_context_tokens),
    )
    # the SFT checkpoint holds every weight: once it exists the warm-up is behind it
    if cfg.sft.enabled and cfg.tiny.induction_steps and not (work / "sft.pt").exists():
        t1, n = time.monotonic(), cfg.tiny.induction_steps
        log(
            f"warm start: induction warm-up on copy rows, at most {n} steps "
            "(it stops once copy accuracy reaches 0.9)"
        )
        acc, steps = induction_warmup(
            model, max_steps=n, seed=cfg.seed, log=log, checkpoint=work / "induction.pt"
        )
        log(
            f"warm start: induction warm-up done in {clock(time.monotonic() - t1)} "
            f"({steps} steps, copy accuracy {acc:.3f})"
        )
    if cfg.sft.enabled:
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
            checkpoint=work / "sft.pt",
        )
    save_atomic(cache, model, tok)  # complete: only now does the cache entry exist
    shutil.rmtree(work, ignore_errors=True)
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
