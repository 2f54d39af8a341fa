"""Supervised warm start on scripted demonstrations.

Demonstrations are rendered with the same renderer and observation deltas as rollouts, so the
model learns exactly the token sequences it will later produce and read.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from turnrl.algo.losses import sequence_logprobs
from turnrl.chat import ChatRenderer
from turnrl.envs.registry import Family
from turnrl.envs.scripted import ScriptedEpisode, run_scripted
from turnrl.policy.hf import (
    pack_rows,
    packed_logits,
    pad_right,
    shared_prefix_length,
    shared_prefix_logits,
)
from turnrl.types import Task


@dataclass
class Demo:
    token_ids: list[int]
    loss_mask: list[int]  # 1 on action tokens


class ExtraTerms(Protocol):
    """Extra SFT loss terms (the tiny lab adds a value weight and copy rows; see
    :mod:`turnrl.tiny.sft`)."""

    def demo_term(self, idx: list[int], logprobs: torch.Tensor) -> torch.Tensor | None:
        """Added to the demonstration loss (and reported with it); ``logprobs`` is [B, T]."""
        ...

    def step_term(self, model: torch.nn.Module, rng: random.Random) -> torch.Tensor | None:
        """Added to the step's loss only (not reported)."""
        ...


async def _play(
    family: Family, tasks: list[Task], noise: float, seed: int, max_turns: int
) -> list[ScriptedEpisode]:
    gate = asyncio.Semaphore(16)

    async def one(i: int, task: Task) -> ScriptedEpisode:
        async with gate:
            agent = family.expert(task, seed=seed + i, noise=noise)
            return await run_scripted(
                family.make_env(), task, agent, max_turns=max_turns, grade=False
            )

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))


def play_demonstrations(
    family: Family, tasks: list[Task], noise: float, seed: int, max_turns: int
) -> list[ScriptedEpisode]:
    return asyncio.run(_play(family, tasks, noise, seed, max_turns))


def episode_messages(ep: ScriptedEpisode, renderer: ChatRenderer) -> list[dict]:
    """The conversation as the agent loop would record it (the final observation is dropped
    when the episode terminated: nothing is generated after it)."""
    msgs = [
        {"role": "system", "content": ep.instructions},
        {"role": "user", "content": ep.first_message},
    ]
    for k, call in enumerate(ep.calls):
        msgs.append({"role": "assistant", "content": renderer.parser.format([call])})
        last = k == len(ep.calls) - 1
        if not (last and ep.terminated):
            msgs.append({"role": "tool", "content": ep.observations[k]})
    return msgs


def render_demo(
    ep: ScriptedEpisode,
    renderer: ChatRenderer,
    tools: list[dict],
    max_obs_tokens: int,
    max_tokens: int,
) -> Demo | None:
    """The episode as the agent loop would have tokenized it, or None when it is longer than
    ``max_tokens``."""
    from turnrl.chat import tool_message
    from turnrl.rollout.agent_loop import clip_observation

    ids = renderer.prompt_ids(episode_messages(ep, renderer)[:2], tools)
    mask = [0] * len(ids)
    for k, call in enumerate(ep.calls):
        action = renderer.encode(renderer.parser.format([call]))
        ids += action + [renderer.turn_end_id]
        mask += [1] * (len(action) + 1)
        if k == len(ep.calls) - 1 and ep.terminated:
            break
        obs = clip_observation(ep.observations[k], renderer, max_obs_tokens)
        delta = renderer.observation_ids([tool_message(obs, call, k * 10)])
        ids += delta
        mask += [0] * len(delta)
    if len(ids) > max_tokens:
        return None
    return Demo(ids, mask)


def batch_logits(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """The plain forward's logits by the cheaper of two exact shortcuts: run the prefix every
    demo shares once (a real model's system prompt and tool list, hundreds of tokens) or pack
    the demos end to end to skip their padding (the tiny model drops the system turn, so its
    demos share a few tokens, and their lengths vary: 39 % of a user-env batch is padding)."""
    B, T = ids.shape
    p = shared_prefix_length(ids, attn)
    lengths = attn.sum(1).tolist()
    packed_cost = T * len(pack_rows(lengths, T))
    if p + B * (T - p) <= packed_cost:
        return shared_prefix_logits(model, ids, attn)
    return packed_logits(model, ids, attn)


def sft_train(
    model: torch.nn.Module,
    demos: list[Demo],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    pad_id: int,
    seed: int,
    extra: ExtraTerms | None = None,
    log: Callable[[int, int, int, float], None] | None = None,
) -> list[float]:
    """Next-token cross-entropy on action tokens (plus ``extra``'s terms); one-cycle lr
    schedule, AdamW without weight decay. Returns the demonstration loss per optimizer step.

        loss = sum_t m_t l_t / sum_t m_t      l_t = -log p(x_t | x_<t), m the action mask
    """
    rng = random.Random(seed)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0
    )
    total = epochs * ((len(demos) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(total, 1), pct_start=0.1
    )
    device = next(model.parameters()).device
    model.train()
    losses = []
    for epoch in range(epochs):
        order = list(range(len(demos)))
        rng.shuffle(order)
        # Plain random batches, their padding skipped by packing (batch_logits). Sorting by
        # length instead makes batches of one kind of episode (gave up, slipped and repaired,
        # ...) that pull every decision one way per step: a model trained from scratch then
        # learned no copying at all in 400 steps.
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for idx in batches:
            ids, attn = pad_right([demos[i].token_ids for i in idx], pad_id, device)
            mask, _ = pad_right([demos[i].loss_mask for i in idx], 0, device)
            logits = batch_logits(model, ids, attn)  # [B, T, V]
            lp = sequence_logprobs(logits, ids)  # [B, T], position t scores token t
            m = mask.float()  # [B, T] action tokens
            loss = -(lp * m).sum() / m.sum().clamp(min=1)
            term = extra.demo_term(idx, lp) if extra is not None else None
            if term is not None:
                loss = loss + term
            demo_loss = loss.item()
            term = extra.step_term(model, rng) if extra is not None else None
            if term is not None:
                loss = loss + term
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(demo_loss)
            if log is not None:
                log(epoch, len(losses), total, demo_loss)
    return losses
