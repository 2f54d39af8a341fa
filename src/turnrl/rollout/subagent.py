"""Frozen subagents: a ``delegate(task)`` tool whose answer is an observation.

With ``subagent.enabled`` every env of the run is wrapped in :class:`DelegatingEnv`, which adds
one tool, ``delegate(task)``. A call runs a whole sub-episode: the env provides where the
subagent works (``env.subagent_env()``, see :mod:`turnrl.envs.base`), a frozen model plays
it under its own budgets (turns, tokens, wall clock), and the observation of the step that
ended it (its answer) comes back to the agent as the tool's output.

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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch

from turnrl.chat import ChatRenderer
from turnrl.envs.base import StepResult, ToolEnv, ToolOutput, tool_schema
from turnrl.envs.guard import act, guard
from turnrl.envs.scripted import ScriptedAgent, ScriptedEpisode, run_scripted
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import (
    EpisodeRequest,
    RolloutLimits,
    default_sampling,
    run_episode,
)
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall, Trajectory

STOPS = {
    TerminationReason.MAX_TURNS: "ran out of turns",
    TerminationReason.CONTEXT_LIMIT: "ran out of context tokens",
    TerminationReason.TIMEOUT: "ran past its time limit",
    TerminationReason.PARSE_ERRORS: "wrote too many malformed tool calls",
    TerminationReason.ENV_ERROR: "failed",
}


@dataclass
class SubCall:
    """One delegated call as the main episode records it."""

    reason: str  # the sub-episode's TerminationReason value ("done": it answered)
    turns: int
    tokens: int  # the sub-episode's context (prompt, actions, observations)
    generated_tokens: int  # tokens the subagent sampled
    time_s: float
    answer: str | None = None
    error: str | None = None
    success: float | None = None  # the sub-env's own grade, where it gives one

    @property
    def observation(self) -> str:
        if self.answer is not None:  # the tool's output is the answer itself
            return self.answer
        detail = f": {self.error}" if self.error else ""
        return f"The subagent stopped without an answer: it {STOPS[TerminationReason(self.reason)]}{detail}."


class _Answered(ToolEnv):
    """Forwards to a sub-env (its calls on its own event loop, :mod:`turnrl.envs.guard`) and
    keeps the observation of the step that ended the episode (the subagent's answer)."""

    guarded = True

    def __init__(self, env: ToolEnv) -> None:
        self.env, self.result = guard(env), None  # the answer
        self.tools, self.final_answer = env.tools, env.final_answer

    @property
    def instructions(self) -> str:  # type: ignore[override]
        return self.env.instructions

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.env.tool_schemas()

    async def reset(self, task: Task) -> str:
        return await self.env.reset(task)

    async def step(self, call) -> StepResult:
        return self._keep(await self.env.step(call))

    async def answer(self, text: str) -> StepResult:  # type: ignore[override]
        return self._keep(await self.env.answer(text))

    async def act(self, agent: ScriptedAgent, observation: str) -> ToolCall | None:
        return await act(self.env, agent, observation)

    def _keep(self, step: StepResult) -> StepResult:
        if step.terminated:
            self.result = step.observation
        return step

    async def grade(self) -> RewardResult:
        return await self.env.grade()

    async def close(self) -> None:
        await self.env.close()


class Subagent(Protocol):
    async def run(self, env: ToolEnv, task: Task) -> SubCall: ...


def _call_of(traj: Trajectory, env: _Answered, generated: int) -> SubCall:
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
        answered = _Answered(env)
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
        from turnrl.rollout.endpoint_agent import CHARS_PER_TOKEN, run_endpoint_episode

        gate, _ = self._state.get()
        answered = _Answered(env)
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


class ScriptedSubagent:
    """The env's scripted sub-expert as the subagent, for SFT demonstrations: its episodes are
    kept (``episodes``) so the warm start also learns the subagent's side."""

    def __init__(
        self, expert: Callable[[Task], ScriptedAgent], max_turns: int, timeout_s: float = 300.0
    ) -> None:
        self.expert, self.max_turns, self.timeout_s = expert, max_turns, timeout_s
        self.episodes: list[ScriptedEpisode] = []

    async def run(self, env: ToolEnv, task: Task) -> SubCall:
        answered = _Answered(env)
        t0 = time.monotonic()
        ep = await run_scripted(
            answered, task, self.expert(task), max_turns=self.max_turns, timeout_s=self.timeout_s
        )
        if ep.failed is None:  # a demonstration only when it ran to its end
            self.episodes.append(ep)
        done = ep.terminated and answered.result is not None
        reason = ep.failed or (TerminationReason.DONE if done else TerminationReason.MAX_TURNS)
        return SubCall(
            reason=reason.value,
            turns=len(ep.calls),
            tokens=0,
            generated_tokens=0,
            time_s=time.monotonic() - t0,
            answer=answered.result if done else None,
            error=ep.error,
            success=float(ep.result.success) if ep.result is not None else None,
        )


class DelegatingEnv(ToolEnv):
    """An env with one more tool, ``delegate``, answered by ``subagent`` (see the module
    docstring). Everything else is the wrapped env's, whose calls run on its own event loop
    (:mod:`turnrl.envs.guard`); ``delegate`` runs on the caller's, where the subagent samples."""

    guarded = True

    def __init__(self, env: ToolEnv, subagent: Subagent) -> None:
        self.env, self.subagent = guard(env), subagent
        self.tools = (*env.tools, "delegate")
        self.final_answer = env.final_answer
        self.name = env.name
        self.calls: list[SubCall] = []
        self.task: Task | None = None

    @property
    def instructions(self) -> str:  # type: ignore[override]
        return self.env.instructions

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [*self.env.tool_schemas(), tool_schema(self.delegate)]

    async def reset(self, task: Task) -> str:
        self.task, self.calls = task, []
        return await self.env.reset(task)

    async def delegate(self, task: str) -> ToolOutput:
        """Hand a sub-task to a helper who can use tools you cannot; returns its answer."""
        assert self.task is not None, "delegate before reset"
        sub_task = Task(
            f"{self.task.id}/sub{len(self.calls)}",
            self.task.env,
            {"task": task, "parent": self.task.payload},
            self.task.split,
        )
        t0 = time.monotonic()
        try:
            call = await self.subagent.run(self.env.subagent_env(), sub_task)
        except Exception as e:  # a failing subagent is the agent's observation, not a crash
            call = SubCall(
                TerminationReason.ENV_ERROR.value, 0, 0, 0, time.monotonic() - t0,
                error=f"{type(e).__name__}: {e}",
            )  # fmt: skip
        self.calls.append(call)
        return ToolOutput(call.observation)

    async def step(self, call) -> StepResult:
        if call.name == "delegate" or call.name not in self.tools:
            return await super().step(call)
        return await self.env.step(call)

    async def answer(self, text: str) -> StepResult:  # type: ignore[override]
        return await self.env.answer(text)

    async def act(self, agent: ScriptedAgent, observation: str) -> ToolCall | None:
        return await act(self.env, agent, observation)

    def anchor(self, observation: str) -> Any:
        return self.env.anchor(observation)

    async def grade(self) -> RewardResult:
        result = await self.env.grade()
        result.info = {**result.info, "subagent": [asdict(c) for c in self.calls]}
        return result

    async def close(self) -> None:
        await self.env.close()


class SharedStateEnv(ToolEnv):
    """A subagent's view of its parent env's state: the parent's ``tools`` (those in
    ``allowed``) on the same object, the delegated text as the task, and a plain-text reply
    as the answer. It never resets or closes the parent, and it is never graded for reward."""

    final_answer = True

    def __init__(self, parent: ToolEnv, allowed: tuple[str, ...]) -> None:
        self.parent, self.tools = parent, tuple(allowed)
        self.instructions = (
            "You are a helper. Use the tools to do the task, then reply with the answer in "
            "plain text (no tool call)."
        )

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [s for s in self.parent.tool_schemas() if s["function"]["name"] in self.tools]

    async def reset(self, task: Task) -> str:
        return str(task.payload["task"])

    async def step(self, call) -> StepResult:
        if call.name not in self.tools:
            return await super().step(call)  # the unknown-tool message, listing ours
        return await self.parent.step(call)

    async def answer(self, text: str) -> StepResult:  # type: ignore[override]
        return StepResult(text, terminated=True)

    async def grade(self) -> RewardResult:
        return RewardResult(0.0, False)


class _Absent:
    async def run(self, env: ToolEnv, task: Task) -> SubCall:
        raise RuntimeError("no subagent has started (and the env has no subagent_expert)")


class SubagentFamily:
    """A family whose envs are wrapped in :class:`DelegatingEnv`. Until :func:`start_subagent`
    gives it a model, the env's scripted sub-expert answers (the SFT demonstrations), and the
    sub-episodes it plays join the demonstrations (``sub_demonstrations``)."""

    def __init__(self, family: Any, max_turns: int) -> None:
        self.family, self.name = family, family.name
        self.subagent: Subagent | None = None
        expert = getattr(family, "subagent_expert", None)
        self.scripted = ScriptedSubagent(expert, max_turns) if expert is not None else None
        for optional in ("expert", "baseline", "random_agent"):
            if hasattr(family, optional):
                setattr(self, optional, getattr(family, optional))

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        return self.family.tasks(split, n, seed)

    def make_env(self) -> ToolEnv:
        return DelegatingEnv(self.family.make_env(), self.subagent or self.scripted or _Absent())

    def sub_demonstrations(self) -> list[ScriptedEpisode]:
        return list(self.scripted.episodes) if self.scripted is not None else []

    def close(self) -> None:
        self.family.close()


def with_subagent(family: Any, max_turns: int) -> SubagentFamily:
    """``family`` with the delegate tool; ValueError (one line) when its env has no sub-env."""
    env = family.make_env()
    if "delegate" in env.tools:
        raise ValueError(f"subagent.enabled: env {family.name} already has a tool named delegate")
    has_hook = type(env).subagent_env is not ToolEnv.subagent_env
    if not (has_hook or env.subagent_tools):
        raise ValueError(
            f"subagent.enabled: env {family.name} gives a subagent nowhere to work; define "
            "subagent_env() or subagent_tools on its env class (see turnrl.envs.base)"
        )
    return SubagentFamily(family, max_turns)


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


def start_subagent(
    cfg: Any,
    family: SubagentFamily,
    model: torch.nn.Module,
    tokenizer: Any,
    renderer: ChatRenderer,
    version: int,
) -> SubagentRun:
    """Build the run's subagent (``subagent.*``) and hand it to ``family``'s envs."""
    s = cfg.subagent
    limits = RolloutLimits(
        max_turns=s.max_turns,
        max_context_tokens=s.max_context_tokens,
        max_new_tokens=s.max_new_tokens,
        max_obs_tokens=cfg.rollout.max_obs_tokens,
        max_parse_errors=cfg.rollout.max_parse_errors,
        episode_timeout_s=s.timeout_s,
    )
    snapshot = None
    if isinstance(s.model, dict):
        from turnrl.policy.openai import endpoint_chat

        chat = endpoint_chat({"max_tokens": s.max_new_tokens, **s.model}, "subagent.model")
        run = SubagentRun(EndpointSubagent(chat, limits, s.concurrency))
        run.describe = f"endpoint {chat.model} @ {chat.base_url}"
    else:
        if s.model == "snapshot":
            snapshot = Snapshot(model, tokenizer.pad_token_id, version)
            policy, sub_renderer = snapshot.policy, renderer
        else:
            from turnrl.chat import check_template
            from turnrl.policy.models import load_model, load_tokenizer, place

            tok = load_tokenizer(s.model, cfg.model.trust_remote_code)
            loaded = load_model(s.model, cfg.model.dtype, cfg.model.device)
            loaded = place(loaded, cfg.model.device, cfg.model.dtype).eval().requires_grad_(False)
            policy = HFPolicy(loaded, tok.pad_token_id)
            sub_renderer = check_template(tok, "auto", source=s.model)
        sub = ModelSubagent(policy, sub_renderer, limits, s.temperature, s.concurrency, cfg.seed)
        run = SubagentRun(sub, snapshot, s.refresh_every)
        run.describe = (
            f"snapshot of the policy at version {version}"
            + (f", refreshed every {s.refresh_every} steps" if s.refresh_every else ", frozen")
            if snapshot is not None
            else f"model {s.model}"
        )
    family.subagent = run.subagent
    return run


def eval_subagent(
    cfg: Any, family: Any, run_dir: Any, model: torch.nn.Module, tokenizer: Any, renderer: Any
) -> SubagentFamily:
    """``family`` with the subagent of the run being evaluated (``turnrl eval``): a snapshot
    that was never refreshed is the run's starting policy again (``run_dir/warm_start`` for the
    tiny model, else ``model.name``); a refreshed one is the evaluated policy, as it was after
    the run's last refresh at the latest."""
    wrapped = with_subagent(family, cfg.subagent.max_turns)
    start = model
    if cfg.subagent.model == "snapshot" and not cfg.subagent.refresh_every and run_dir is not None:
        from turnrl.policy.models import load_model, place

        m = cfg.model
        warm = run_dir / "warm_start"
        source = warm if (warm / "config.json").exists() else m.name
        start = place(load_model(source, m.dtype, m.device, m.trust_remote_code), m.device, m.dtype)
    start_subagent(cfg, wrapped, start, tokenizer, renderer, 0)
    return wrapped


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
