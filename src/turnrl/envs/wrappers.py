"""Env wrappers: an env changed from the outside, in Gymnasium's manner.

:class:`EnvWrapper` forwards every part of the contract (:mod:`turnrl.envs.base`) to the env it
wraps; a subclass overrides only what it changes. Wrappers stack, and the agent loop cannot tell
a wrapped env from a plain one.

The subagent (``subagent.enabled``, driven by :mod:`turnrl.rollout.subagent`) is built from
three of them:

- :class:`DelegatingEnv` adds the ``delegate(task)`` tool, answered by a :class:`Subagent`;
- :class:`SharedStateEnv` is where a subagent works by default: a view of its parent env's state
  offering the tools the parent names in ``subagent_tools``, with a plain-text final answer;
- :class:`AnswerRecorder` keeps the observation of the step that ended a sub-episode (the
  subagent's answer).

None of them imports rollout code: the subagent is anything with
``async run(env, task) -> SubCall``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from turnrl.envs.base import StepResult, ToolEnv, ToolOutput, tool_schema
from turnrl.envs.scripted import ScriptedAgent, ScriptedEpisode, run_scripted
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall

STOPS = {
    TerminationReason.MAX_TURNS: "ran out of turns",
    TerminationReason.CONTEXT_LIMIT: "ran out of context tokens",
    TerminationReason.TIMEOUT: "ran past its time limit",
    TerminationReason.PARSE_ERRORS: "wrote too many malformed tool calls",
    TerminationReason.ENV_ERROR: "failed",
}


class EnvWrapper(ToolEnv):
    """An env that forwards everything to ``self.env``. Override what the wrapper changes."""

    def __init__(self, env: ToolEnv) -> None:
        self.env = env
        self.tools, self.final_answer = env.tools, env.final_answer
        self.name = env.name
        self.subagent_tools = env.subagent_tools

    @property
    def instructions(self) -> str:  # type: ignore[override]
        return self.env.instructions

    @property
    def unwrapped(self) -> ToolEnv:
        """The innermost env."""
        env = self.env
        return env.unwrapped if isinstance(env, EnvWrapper) else env

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.env.tool_schemas()

    async def reset(self, task: Task) -> str:
        return await self.env.reset(task)

    async def step(self, call: ToolCall) -> StepResult:
        return await self.env.step(call)

    async def answer(self, text: str) -> StepResult:
        return await self.env.answer(text)

    def anchor(self, observation: str) -> Any:
        return self.env.anchor(observation)

    def measure(self) -> dict[str, float]:
        return self.env.measure()

    def subagent_env(self) -> ToolEnv | None:
        return self.env.subagent_env()

    async def grade(self) -> RewardResult:
        return await self.env.grade()

    async def close(self) -> None:
        await self.env.close()


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


class Subagent(Protocol):
    """Plays a whole sub-episode in ``env`` on ``task`` and says how it ended."""

    async def run(self, env: ToolEnv, task: Task) -> SubCall: ...


class AnswerRecorder(EnvWrapper):
    """Keeps the observation of the step that ended the episode (the subagent's answer) in
    ``result``."""

    def __init__(self, env: ToolEnv) -> None:
        super().__init__(env)
        self.result: str | None = None

    async def step(self, call: ToolCall) -> StepResult:
        return self._keep(await self.env.step(call))

    async def answer(self, text: str) -> StepResult:
        return self._keep(await self.env.answer(text))

    def _keep(self, step: StepResult) -> StepResult:
        if step.terminated:
            self.result = step.observation
        return step


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

    async def step(self, call: ToolCall) -> StepResult:
        if call.name not in self.tools:
            return await super().step(call)  # the unknown-tool message, listing ours
        return await self.parent.step(call)

    async def answer(self, text: str) -> StepResult:
        return StepResult(text, terminated=True)

    async def grade(self) -> RewardResult:
        return RewardResult(0.0, False)


def sub_env(env: ToolEnv) -> ToolEnv:
    """Where a subagent of ``env`` works: ``env.subagent_env()``, or by default a
    :class:`SharedStateEnv` over ``env.subagent_tools``."""
    own = env.subagent_env()
    if own is not None:
        return own
    if not env.subagent_tools:
        raise NotImplementedError(
            f"{type(env).__name__} has no subagent_env() and no subagent_tools"
        )
    return SharedStateEnv(env, env.subagent_tools)


def can_delegate(env: ToolEnv) -> bool:
    """Whether ``env`` gives a subagent somewhere to work."""
    inner = env.unwrapped if isinstance(env, EnvWrapper) else env
    return type(inner).subagent_env is not ToolEnv.subagent_env or bool(env.subagent_tools)


class DelegatingEnv(EnvWrapper):
    """An env with one more tool, ``delegate``, answered by ``subagent``; every call is kept in
    the grade's ``info["subagent"]``. Everything else is the wrapped env's."""

    def __init__(self, env: ToolEnv, subagent: Subagent) -> None:
        super().__init__(env)
        self.subagent = subagent
        self.tools = (*env.tools, "delegate")
        self.calls: list[SubCall] = []
        self.task: Task | None = None

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
            call = await self.subagent.run(sub_env(self.env), sub_task)
        except Exception as e:  # a failing subagent is the agent's observation, not a crash
            call = SubCall(
                TerminationReason.ENV_ERROR.value, 0, 0, 0, time.monotonic() - t0,
                error=f"{type(e).__name__}: {e}",
            )  # fmt: skip
        self.calls.append(call)
        return ToolOutput(call.observation)

    async def step(self, call: ToolCall) -> StepResult:
        if call.name == "delegate" or call.name not in self.tools:
            return await ToolEnv.step(self, call)  # dispatch to delegate (or the unknown tool)
        return await self.env.step(call)

    async def grade(self) -> RewardResult:
        result = await self.env.grade()
        result.info = {**result.info, "subagent": [asdict(c) for c in self.calls]}
        return result


# -- a family whose envs delegate ------------------------------------------------------------


class ScriptedSubagent:
    """The env's scripted sub-expert as the subagent, for SFT demonstrations: its episodes are
    kept (``episodes``) so the warm start also learns the subagent's side."""

    def __init__(self, expert: Callable[[Task], ScriptedAgent], max_turns: int) -> None:
        self.expert, self.max_turns = expert, max_turns
        self.episodes: list[ScriptedEpisode] = []

    async def run(self, env: ToolEnv, task: Task) -> SubCall:
        answered = AnswerRecorder(env)
        t0 = time.monotonic()
        ep = await run_scripted(answered, task, self.expert(task), max_turns=self.max_turns)
        self.episodes.append(ep)
        done = ep.terminated and answered.result is not None
        return SubCall(
            reason=(TerminationReason.DONE if done else TerminationReason.MAX_TURNS).value,
            turns=len(ep.calls),
            tokens=0,
            generated_tokens=0,
            time_s=time.monotonic() - t0,
            answer=answered.result if done else None,
            success=float(ep.result.success) if ep.result is not None else None,
        )


class _Absent:
    async def run(self, env: ToolEnv, task: Task) -> SubCall:
        raise RuntimeError("no subagent has started (and the env has no subagent_expert)")


class SubagentFamily:
    """A family whose envs are wrapped in :class:`DelegatingEnv`. Until the run starts a subagent
    (``turnrl.run.build.start_subagent``), the env's scripted sub-expert answers (the SFT demonstrations), and the
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
    if not can_delegate(env):
        raise ValueError(
            f"subagent.enabled: env {family.name} gives a subagent nowhere to work; define "
            "subagent_env() or subagent_tools on its env class (see turnrl.envs.base)"
        )
    return SubagentFamily(family, max_turns)
