"""Run a scripted agent (an expert or a baseline) through an environment, without a model.

Scripted agents produce demonstrations for the SFT warm start and sanity baselines for graders
(an expert should score 1, an agent that does nothing should score about 0).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from turnrl.envs.base import ToolEnv
from turnrl.envs.guard import act, close_limit_s, guard, origin
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall


class ScriptedAgent(Protocol):
    def act(self, observation: str) -> ToolCall | None:
        """The next call, or None to stop (the episode is then graded as it stands)."""


@dataclass
class ScriptedEpisode:
    task: Task
    instructions: str
    first_message: str
    tools: list[dict] = field(default_factory=list)  # schemas shown in this episode
    calls: list[ToolCall] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    terminated: bool = False
    result: RewardResult | None = None
    # TIMEOUT or ENV_ERROR when the env or the agent ran past a limit or raised (``error``
    # says which call, and where); None when the episode ran to its end
    failed: TerminationReason | None = None
    error: str | None = None


async def run_scripted(
    env: ToolEnv,
    task: Task,
    agent: ScriptedAgent,
    max_turns: int = 30,
    grade: bool = True,
    timeout_s: float = 300.0,
) -> ScriptedEpisode:
    """Play ``agent`` against ``env`` for one episode and grade it (unless ``grade`` is False:
    demonstrations need the transcript, not the score). Closes the env. Never raises: an env
    or agent that raises or runs past ``timeout_s`` (the whole episode) or the env's
    ``tool_timeout_s`` (one call) ends the episode with ``failed`` and ``error`` set. The
    env's calls and the agent's run on the env's own event loop (:mod:`turnrl.envs.guard`)."""
    env = guard(env)
    deadline = time.monotonic() + timeout_s
    episode = ScriptedEpisode(task, "", "")
    phase = "reset"

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise asyncio.TimeoutError
        return left

    try:
        first = await asyncio.wait_for(env.reset(task), remaining())
        episode.instructions, episode.first_message = env.instructions, first
        episode.tools = env.tool_schemas()
        observation = first
        for _ in range(max_turns):
            phase = "the scripted agent's act"
            call = await asyncio.wait_for(act(env, agent, observation), remaining())
            if call is None:
                break
            phase = f"tool '{call.name}'"
            step = await asyncio.wait_for(env.step(call), remaining())
            episode.calls.append(call)
            episode.observations.append(step.observation)
            observation = step.observation
            if step.terminated or step.truncated:
                episode.terminated = step.terminated
                break
        if grade:
            phase = "grade"
            episode.result = await asyncio.wait_for(env.grade(), remaining())
    except asyncio.TimeoutError as e:
        episode.failed = TerminationReason.TIMEOUT
        episode.error = str(e) or (
            f"episode wall-clock limit ({timeout_s:g} s) reached in {phase} (env {env.name})"
        )
    except Exception as e:
        episode.failed = TerminationReason.ENV_ERROR
        episode.error = f"{type(e).__name__}: {e} ({phase} of env {env.name}, {origin(e)})"
    finally:
        try:
            await asyncio.wait_for(env.close(), close_limit_s())
        except Exception as e:
            episode.error = episode.error or f"close failed: {type(e).__name__}: {e}"
    return episode


class DoNothingAgent:
    """Ends the episode at once by calling ``finish_tool``: the floor every grader must score ~0."""

    def __init__(self, finish_tool: str, arguments: dict | None = None) -> None:
        self.call = ToolCall(finish_tool, arguments or {})

    def act(self, observation: str) -> ToolCall:
        return self.call


class IdleAgent:
    """Does nothing at all: the episode is graded right after reset. The do-nothing floor for
    an env without a finishing tool to call."""

    def act(self, observation: str) -> None:
        return None


_WORD = re.compile(r"[A-Za-z0-9_./-]+")


class RandomToolAgent:
    """Calls a random tool with arguments drawn from its JSON schema (numbers small, strings
    words of the last observation): the chance floor of any env, from its schemas alone."""

    def __init__(self, tools: list[dict[str, Any]], seed: int = 0) -> None:
        self.tools = [t["function"] for t in tools]
        self.rng = random.Random(seed)

    def act(self, observation: str) -> ToolCall | None:
        if not self.tools:
            return None
        tool = self.rng.choice(self.tools)
        params = tool.get("parameters", {})
        required = set(params.get("required", []))
        words = _WORD.findall(observation) or ["x"]
        args = {
            name: self._value(spec, words)
            for name, spec in params.get("properties", {}).items()
            if name in required or self.rng.random() < 0.5
        }
        return ToolCall(tool["name"], args)

    def _value(self, spec: dict[str, Any], words: list[str]) -> Any:
        if "enum" in spec:
            return self.rng.choice(spec["enum"])
        kind = spec.get("type")
        if kind is None and spec.get("anyOf"):  # Optional[...]: the non-null member
            kind = next((s.get("type") for s in spec["anyOf"] if s.get("type") != "null"), None)
        if kind == "integer":
            return self.rng.randint(-2, 20)
        if kind == "number":
            return round(self.rng.uniform(-2, 20), 2)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "array":
            return [self.rng.choice(words)]
        if kind == "object":
            return {}
        return self.rng.choice(words)
