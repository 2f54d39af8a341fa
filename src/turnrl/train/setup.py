"""Model set-up: the tiny default (tokenizer + SFT warm start, cached) or a real model (+ LoRA)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerFast

from turnrl.chat import HermesToolCallParser, check_template
from turnrl.envs.registry import Family, env_fingerprint
from turnrl.envs.scripted import IdleAgent, ScriptedEpisode, run_scripted
from turnrl.policy.models import load_model, load_tokenizer
from turnrl.policy.tiny import load_tokenizer as load_tiny_tokenizer
from turnrl.policy.tiny import tiny_model, tool_call_tokens, train_tokenizer
from turnrl.train.config import TrainConfig
from turnrl.train.export import tokenizer_source
from turnrl.train.induction import induction_warmup
from turnrl.train.sft import play_demonstrations, render_demo, sft_train
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
    saved = run_dir / "warm_start"
    if cfg.model.name == "tiny":
        if (saved / "config.json").exists():  # resume: architecture + tokenizer of this run
            from transformers import LlamaForCausalLM

            return LlamaForCausalLM.from_pretrained(saved), load_tiny_tokenizer(saved)
        model, tok = _tiny_with_warm_start(cfg, family, train_tasks, log)
        model.save_pretrained(saved)
        tok.save_pretrained(saved)
        return model, tok
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
        _warm_start(cfg, family, train_tasks, model, tok, log)
    return model, tok


def _tiny_with_warm_start(
    cfg: TrainConfig, family: Family, train_tasks: list[Task], log
) -> tuple[torch.nn.Module, Any]:
    source = env_fingerprint(cfg.env.name, cfg.env.tasks)  # "" for a shipped env's own tasks
    key = hashlib.sha1(
        json.dumps(
            {
                **({"env_source": source} if source else {}),
                "model": cfg.model.model_dump(),
                # eval never reaches SFT; no tasks file: the keys runs before it had
                "env": cfg.env.model_dump(
                    exclude={"eval_tasks"} | ({"tasks"} if cfg.env.tasks is None else set())
                ),
                "sft": cfg.sft.model_dump(),
                "seed": cfg.seed,
                "rollout": [
                    cfg.rollout.max_obs_tokens,
                    cfg.rollout.max_context_tokens,
                    cfg.rollout.max_turns,
                ],
                "v": 12,
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:12]
    cache = cache_root() / f"tiny-{family.name}-{key}"
    if (cache / "config.json").exists():
        from transformers import LlamaForCausalLM

        log(f"warm start: cached SFT model {cache}")
        return LlamaForCausalLM.from_pretrained(cache), load_tiny_tokenizer(cache)
    t0 = time.monotonic()
    # an env without an expert (SFT is then off) gives the text it shows: instructions, first
    # messages and tool schemas, each task's opening
    has_expert = hasattr(family, "expert")
    episodes = (
        _demonstrations(cfg, family, train_tasks) if has_expert else _openings(train_tasks, family)
    )
    tok = demo_tokenizer(episodes, cfg.model.vocab_size)
    log(
        f"warm start: tokenizer ({len(tok)} tokens) from {len(episodes)} "
        f"{'scripted episodes' if has_expert else 'task openings'} in {time.monotonic() - t0:.0f}s"
    )
    model = tiny_model(
        tok,
        seed=cfg.seed,
        hidden_size=cfg.model.hidden_size,
        layers=cfg.model.layers,
        context=max(4096, cfg.rollout.max_context_tokens),
    )
    if cfg.sft.enabled:
        _train_demos(cfg, episodes, model, tok, log)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if cache.exists():  # another run cached the same warm start meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, cache)
    return model, tok


def demo_tokenizer(episodes: list[ScriptedEpisode], vocab_size: int) -> PreTrainedTokenizerFast:
    """The tiny model's tokenizer, trained on the text of scripted episodes: instructions,
    observations, the tool list and exactly the tool-call text the model will write."""
    parser = HermesToolCallParser()
    texts = []
    for ep in episodes:
        texts += [ep.instructions, ep.first_message] + ep.observations
        texts += [parser.format([c]) for c in ep.calls]
    # every tool any episode showed (an env may narrow the list per task, as the tools env does)
    tools = list({t["function"]["name"]: t for ep in episodes for t in ep.tools}.values())
    texts += [json.dumps(t["function"]) for t in tools]
    return train_tokenizer(texts, vocab_size=vocab_size, extra_tokens=tool_call_tokens(tools))


def _demonstrations(cfg: TrainConfig, family: Family, train_tasks: list[Task]):
    rng = random.Random(cfg.seed)
    tasks = [rng.choice(train_tasks) for _ in range(cfg.sft.episodes)]
    return play_demonstrations(family, tasks, cfg.sft.noise, cfg.seed, cfg.rollout.max_turns)


def _openings(tasks: list[Task], family: Family, limit: int = 400) -> list[ScriptedEpisode]:
    async def play() -> list[ScriptedEpisode]:
        return [
            await run_scripted(family.make_env(), t, IdleAgent(), grade=False)
            for t in tasks[:limit]
        ]

    return asyncio.run(play())


def _train_demos(cfg: TrainConfig, episodes, model, tok, log) -> None:
    t0 = time.monotonic()
    renderer = check_template(tok, cfg.model.tool_format, source=cfg.model.name)
    demos = []
    for ep in episodes:
        demo = render_demo(
            ep, renderer, ep.tools, cfg.rollout.max_obs_tokens, cfg.rollout.max_context_tokens
        )
        if demo is not None:
            demos.append(demo)
    log(
        f"warm start: SFT on {len(demos)} demonstrations ({sum(len(d.token_ids) for d in demos)} tokens)"
    )
    if cfg.sft.induction_steps:
        t1 = time.monotonic()
        acc = induction_warmup(
            model,
            max_steps=cfg.sft.induction_steps,
            seed=cfg.seed,
            log=lambda step, loss, acc: log(
                f"  induction step {step} loss {loss:.3f} copy accuracy {acc:.3f}"
            ),
        )
        log(
            f"warm start: induction warm-up done in {time.monotonic() - t1:.0f}s (copy accuracy {acc:.3f})"
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
        value_weight=cfg.sft.value_weight,
        copy_rows=cfg.sft.copy_rows,
        log=progress,
    )
    log(f"warm start: SFT done in {time.monotonic() - t0:.0f}s (final loss {last[0]:.3f})")


def _warm_start(cfg: TrainConfig, family: Family, train_tasks, model, tok, log) -> None:
    episodes = _demonstrations(cfg, family, train_tasks)
    _train_demos(cfg, episodes, model, tok, log)
