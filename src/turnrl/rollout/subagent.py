"""Frozen subagents: a ``delegate(task)`` tool whose answer is an observation.

With ``subagent.enabled`` every env of the run is wrapped in
:class:`~turnrl.envs.wrappers.DelegatingEnv`, which adds one tool, ``delegate(task)``. A call
runs a whole sub-episode: the env provides where the subagent works (``env.subagent_env()``,
see :mod:`turnrl.envs.base`), a frozen model plays it under its own budgets (turns, tokens,
wall clock), and the observation of the step that ended it (its answer) comes back to the agent
as the tool's output. This module holds the drivers that play sub-episodes (a local model, an
endpoint, the env's scripted sub-expert), the family that wraps every env, and the metrics; the
run builds the subagent a config asks for (:mod:`turnrl.run.build`).

Why frozen: the policy gradient treats everything the env returns as drawn from a
distribution that does not depend on the policy's parameters (mask 0, no gradient). A
subagent running on the weights being trained would break that; a frozen one keeps it true,
so its answer is an observation like any tool output (the reference note's Kimi K2.5 point).
Nothing of the sub-episode enters the main trajectory but the answer's text, tokenized as env
text. The subagent is one of:

- ``snapshot``: a copy of the policy's weights in their own tensors, without grad, taken at
  the start and copied again every ``refresh_every`` steps (0: never);
- a local model directory (its own tokenizer and chat template);
- an OpenAI-compatible endpoint (messages in and out, :mod:`turnrl.rollout.endpoint_agent`).

A budget overrun, an endpoint failure or a crashing sub-env ends the sub-episode with its
reason, and the agent reads an observation saying so; the main episode goes on. Per call the
env records turns, tokens, time and the ending in its grade's ``info["subagent"]``;
:func:`subagent_metrics` turns them into the step's ``subagent/*`` metrics.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from turnrl.chat import ChatRenderer
from turnrl.envs.base import ToolEnv
from turnrl.envs.wrappers import STOPS, AnswerRecorder, Subagent, SubCall
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import (
    EpisodeRequest,
    RolloutLimits,
    default_sampling,
    run_episode,
)
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.endpoint_agent import CHARS_PER_TOKEN, run_endpoint_episode
from turnrl.types import Task, TerminationReason, Trajectory


def _call_of(traj: Trajectory, env: AnswerRecorder, generated: int) -> SubCall:
    done = traj.termination is TerminationReason.DONE
    return SubCall(
        reason=traj.termination.value,
        turns=len(traj.turns),
        tokens=int(traj.metrics.get("tokens", 0)),
        generated_tokens=generated,
        time_s=traj.metrics.get("time/episode_s", 0.0),
        answer=env.result if done else None,
        error=traj.error,
        success=traj.metrics.get("success"),
    )


class _PerLoop:
    """A concurrency gate (and the batcher) per event loop: the training loop runs each step's
    rollouts in a fresh ``asyncio.run``, and asyncio objects belong to one loop."""

    def __init__(self, concurrency: int, batcher: Callable[[], GenerationBatcher] | None) -> None:
        self.concurrency, self.make_batcher = concurrency, batcher
        self.loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> tuple[asyncio.Semaphore, GenerationBatcher | None]:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:
            self.loop, self.gate = loop, asyncio.Semaphore(self.concurrency)
            self.batcher = self.make_batcher() if self.make_batcher is not None else None
        return self.gate, self.batcher


class ModelSubagent:
    """A local model (a frozen snapshot of the policy or another model directory) playing
    sub-episodes token-in/token-out with its own renderer and its own batcher."""

    def __init__(
        self,
        policy: HFPolicy,
        renderer: ChatRenderer,
        limits: RolloutLimits,
        temperature: float = 1.0,
        concurrency: int = 8,
        seed: int = 0,
    ) -> None:
        self.policy, self.renderer, self.limits = policy, renderer, limits
        params = default_sampling(renderer, temperature)  # the batcher sets max_new_tokens
        self._state = _PerLoop(concurrency, lambda: GenerationBatcher(policy, params))
        self._rng = random.Random(seed)

    async def run(self, env: ToolEnv, task: Task) -> SubCall:
        gate, batcher = self._state.get()
        assert batcher is not None
        answered = AnswerRecorder(env)
        request = EpisodeRequest(task, task.id, self._rng.randrange(2**20))
        async with gate:
            traj = await run_episode(answered, request, self.renderer, batcher, self.limits)
        return _call_of(traj, answered, sum(traj.loss_mask))


class EndpointSubagent:
    """A model behind an OpenAI-compatible endpoint playing sub-episodes on messages. Its
    token counts are estimates (characters / 4): the endpoint's tokenizer is not ours."""

    def __init__(self, chat: Any, limits: RolloutLimits, concurrency: int = 8) -> None:
        self.chat, self.limits = chat, limits
        self._state = _PerLoop(concurrency, None)

    async def run(self, env: ToolEnv, task: Task) -> SubCall:
        gate, _ = self._state.get()
        answered = AnswerRecorder(env)
        async with gate:
            traj = await run_endpoint_episode(
                answered, EpisodeRequest(task, task.id, 0), self.chat, self.limits
            )
        chars = [len(str(m.get("content") or "")) for m in traj.messages]
        written = [
            len(str(m.get("content") or "")) + len(str(m.get("tool_calls") or ""))
            for m in traj.messages
            if m["role"] == "assistant"
        ]
        call = _call_of(traj, answered, sum(written) // CHARS_PER_TOKEN)
        call.tokens = sum(chars) // CHARS_PER_TOKEN
        return call


class Snapshot:
    """A frozen copy of a policy: its own parameter tensors (``copy.deepcopy``), no grad, eval
    mode. ``refresh`` copies the policy's current values into those tensors, under the
    sampler's lock so no sub-episode samples from half-copied weights."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int, version: int = 0) -> None:
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.policy = HFPolicy(self.model, pad_token_id)
        self.policy.version = version
        self.refreshes = 0

    @torch.no_grad()
    def refresh(self, model: torch.nn.Module, version: int) -> None:
        with self.policy.lock:
            self.model.load_state_dict(model.state_dict())
            self.policy.version = version
            self.refreshes += 1


@dataclass
class SubagentRun:
    """What the training loop holds: the subagent, and the snapshot it refreshes (if any)."""

    subagent: Subagent
    snapshot: Snapshot | None = None
    refresh_every: int = 0
    describe: str = ""

    def step_done(self, model: torch.nn.Module, step: int, version: int) -> None:
        """After training step ``step``: refresh the snapshot when it is due."""
        if self.snapshot is not None and self.refresh_every and step % self.refresh_every == 0:
            self.snapshot.refresh(model, version)

    def resumed(self, model: torch.nn.Module, version: int) -> None:
        """On resume a refreshed snapshot restarts from the resumed weights (the snapshot of a
        run that never refreshes is the starting policy, rebuilt as it was)."""
        if self.snapshot is not None and self.refresh_every:
            self.snapshot.refresh(model, version)

    def metrics(self, trajs: list[Trajectory]) -> dict[str, float]:
        """The step's ``subagent/*`` metrics, with the snapshot's policy version."""
        out = subagent_metrics(trajs)
        if self.snapshot is not None:
            out["subagent/version"] = float(self.snapshot.policy.version)
        return out


def episode_metrics(calls: list[dict[str, Any]]) -> dict[str, float]:
    """One episode's delegated calls as its metrics (sums over its calls)."""
    return {
        "subagent/calls": float(len(calls)),
        "subagent/turns": float(sum(c["turns"] for c in calls)),
        "subagent/tokens": float(sum(c["tokens"] for c in calls)),
        "subagent/generated_tokens": float(sum(c["generated_tokens"] for c in calls)),
        "subagent/time_s": float(sum(c["time_s"] for c in calls)),
    }


def subagent_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """The step's ``subagent/*`` metrics from the calls each episode's grade recorded (each
    episode also gets its own sums in ``trajectory.metrics``): calls, turns, tokens and time
    per episode; the share of episodes that delegated; the share of calls that answered, that
    the sub-env graded a success, and that each budget cut."""
    calls_per = []
    for t in trajs:
        calls = t.graded.info.get("subagent") if t.graded is not None else None
        if calls is not None:
            t.metrics.update(episode_metrics(calls))
            calls_per.append(calls)
    if not calls_per:
        return {}
    n = len(calls_per)
    per_episode = [episode_metrics(cs) for cs in calls_per]
    out = {k: sum(m[k] for m in per_episode) / n for k in per_episode[0]}
    out["subagent/delegation_rate"] = sum(bool(cs) for cs in calls_per) / n
    calls = [c for cs in calls_per for c in cs]
    k = max(len(calls), 1)
    out["subagent/answered"] = sum(c["reason"] == "done" for c in calls) / k
    graded = [c["success"] for c in calls if c["success"] is not None]
    if graded:  # the sub-env's own grade of the answer, where it gives one
        out["subagent/success"] = sum(graded) / len(graded)
    for reason in STOPS:
        out[f"subagent/stop/{reason.value}"] = sum(c["reason"] == reason.value for c in calls) / k
    return out
