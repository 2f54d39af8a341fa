"""Supervised warm start on scripted demonstrations.

Demonstrations are rendered with the same renderer and observation deltas as rollouts, so the
model learns exactly the token sequences it will later produce and read.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass

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
from turnrl.train.induction import copy_loss
from turnrl.types import Task, ToolCall


@dataclass
class Demo:
    token_ids: list[int]
    loss_mask: list[int]  # 1 on action tokens
    # per token, its share of a tool-argument value: 1/n on each of a value's n tokens
    value_mask: list[float]


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
    from turnrl.chat import tool_message
    from turnrl.rollout.agent_loop import clip_observation

    ids = renderer.prompt_ids(episode_messages(ep, renderer)[:2], tools)
    mask = [0] * len(ids)
    values = [0.0] * len(ids)
    for k, call in enumerate(ep.calls):
        action, in_value = _action_tokens(call, renderer)
        ids += action + [renderer.turn_end_id]
        mask += [1] * (len(action) + 1)
        values += in_value + [0.0]
        if k == len(ep.calls) - 1 and ep.terminated:
            break
        obs = clip_observation(ep.observations[k], renderer, max_obs_tokens)
        delta = renderer.observation_ids([tool_message(obs, call, k * 10)])
        ids += delta
        mask += [0] * len(delta)
        values += [0.0] * len(delta)
    if len(ids) > max_tokens:
        return None
    return Demo(ids, mask, values)


def _action_tokens(call: ToolCall, renderer: ChatRenderer) -> tuple[list[int], list[float]]:
    """The call's tokens, and per token its share of an argument value (0 on the frame).
    Values are where an agent copies from its context (a path, an id, the text it replaces);
    the frame around them is the same in every call. A value of n tokens gives 1/n to each, so
    every value counts once however it tokenizes: an order id's digits, which follow the ``#W``
    every id starts with, weigh as much as a one-token operator."""
    ids, spans = value_spans(call, renderer)
    shares = [0.0] * len(ids)
    for first, end in spans:
        shares[first:end] = [1.0 / (end - first)] * (end - first)
    return ids, shares


def value_spans(call: ToolCall, renderer: ChatRenderer) -> tuple[list[int], list[tuple[int, int]]]:
    """The call's tokens and, per argument value in order, the token range [first, end) it
    occupies (none when the parser formats values differently, or for an empty value)."""
    text = renderer.parser.format([call])
    enc = renderer.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    chars, pos = [], 0
    for key, value in call.arguments.items():
        name, encoded = json.dumps(key), json.dumps(value, separators=(",", ":"))
        at = text.find(f"{name}:{encoded}", pos)
        if at < 0:  # a parser that formats differently: no value spans
            return enc["input_ids"], []
        start = at + len(name) + 1
        quoted = isinstance(value, str)
        chars.append((start + quoted, start + len(encoded) - quoted))
        pos = start + len(encoded)
    spans = []
    for s, e in chars:
        inside = [i for i, (a, b) in enumerate(offsets) if a < e and b > s]
        if inside:
            spans.append((inside[0], inside[-1] + 1))
    return enc["input_ids"], spans


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
    value_weight: float = 0.0,
    copy_rows: int = 0,
    log=None,
) -> list[float]:
    """Next-token cross-entropy on action tokens, plus ``value_weight`` times the same on the
    argument values alone, plus (with ``copy_rows``) the copy loss of that many synthetic rows
    (``train.induction``), which keeps an induction circuit the model was warmed up with.
    Returns the demonstration loss per optimizer step.

        loss = sum_t m_t l_t / sum_t m_t + w * sum_t v_t l_t / sum_t v_t

    with l_t = -log p(x_t | x_<t), m the action mask and v the value mask (1/n on each of the n
    tokens of a tool-argument value, so the second term is the mean over the batch's values of
    each value's mean token loss). Why the second term: in a plain token mean the few value
    tokens (a path, an operator, an order id) are a small share of each action, and a model
    trained from scratch spends its attention on the fixed frame around them; it then learns
    to copy a value from its context late or never. With weight 3 the tiny default model
    copies the file name and both operators, given enough distinct demonstrations: repeating
    few of them many times teaches it to guess values from their base rates instead
    (docs/benchmarks.md, sessions 6, 9 and 10).
    """
    rng = random.Random(seed)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0
    )
    total = epochs * ((len(demos) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(total, 1), pct_start=0.1
    )
    model.train()
    losses = []
    for epoch in range(epochs):
        order = list(range(len(demos)))
        rng.shuffle(order)
        # Plain random batches, their padding skipped by packing (batch_logits). Sorting by
        # length instead makes batches of one kind of episode (gave up, slipped and repaired,
        # ...) that pull every decision one way per step: the tiny model then learned no
        # copying at all in 400 steps (docs/benchmarks.md, session 6).
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for idx in batches:
            ids, attn = pad_right([demos[i].token_ids for i in idx], pad_id, torch.device("cpu"))
            mask, _ = pad_right([demos[i].loss_mask for i in idx], 0, torch.device("cpu"))
            values, _ = pad_right(
                [demos[i].value_mask for i in idx], 0.0, torch.device("cpu"), torch.float
            )
            logits = batch_logits(model, ids, attn)  # [B, T, V]
            lp = sequence_logprobs(logits, ids)  # [B, T], position t scores token t
            m, v = mask.float(), values  # [B, T] action tokens, value shares
            loss = -(lp * m).sum() / m.sum().clamp(min=1)
            if value_weight:
                loss = loss - value_weight * (lp * v).sum() / v.sum().clamp(min=1)
            demo_loss = loss.item()
            if copy_rows:
                loss = loss + copy_loss(model, rng, copy_rows)[0]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(demo_loss)
            if log is not None:
                log(epoch, len(losses), total, demo_loss)
    return losses
