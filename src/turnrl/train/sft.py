"""Supervised warm start on scripted demonstrations.

Demonstrations are rendered with the same renderer and observation deltas as rollouts, so the
model learns exactly the token sequences it will later produce and read.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import torch

from turnrl.algo.losses import sequence_logprobs
from turnrl.chat import ChatRenderer
from turnrl.envs.registry import Family
from turnrl.envs.scripted import ScriptedEpisode, run_scripted
from turnrl.policy.hf import pad_right, shared_prefix_logits
from turnrl.types import Task


@dataclass
class Demo:
    token_ids: list[int]
    loss_mask: list[int]


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
    from turnrl.rollout.agent_loop import clip_observation

    ids = renderer.prompt_ids(episode_messages(ep, renderer)[:2], tools)
    mask = [0] * len(ids)
    for k, call in enumerate(ep.calls):
        action = renderer.encode(renderer.parser.format([call])) + [renderer.turn_end_id]
        ids += action
        mask += [1] * len(action)
        if k == len(ep.calls) - 1 and ep.terminated:
            break
        obs = clip_observation(ep.observations[k], renderer, max_obs_tokens)
        delta = renderer.encode(renderer.observation_delta([{"role": "tool", "content": obs}]))
        ids += delta
        mask += [0] * len(delta)
    if len(ids) > max_tokens:
        return None
    return Demo(ids, mask)


def sft_train(
    model: torch.nn.Module,
    demos: list[Demo],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    pad_id: int,
    seed: int,
    log=None,
) -> list[float]:
    """Next-token cross-entropy on action tokens only. Returns the loss per optimizer step."""
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
        # Similar lengths together: less padding per batch.
        chunks = [order[i : i + batch_size * 8] for i in range(0, len(order), batch_size * 8)]
        batches = []
        for chunk in chunks:
            chunk.sort(key=lambda i: len(demos[i].token_ids))
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        for idx in batches:
            ids, attn = pad_right([demos[i].token_ids for i in idx], pad_id, torch.device("cpu"))
            mask, _ = pad_right([demos[i].loss_mask for i in idx], 0, torch.device("cpu"))
            # The system prompt and tool list, the same in every demo, run once per batch.
            logits = shared_prefix_logits(model, ids, attn)  # [B, T, V]
            lp = sequence_logprobs(logits, ids)  # [B, T], position t scores token t
            m = mask.float()  # [B, T] action tokens only
            loss = -(lp * m).sum() / m.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            if log is not None:
                log(epoch, len(losses), total, loss.item())
    return losses
