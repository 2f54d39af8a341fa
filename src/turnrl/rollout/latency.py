"""Simulated tool latency: an env wrapper whose steps are usually fast and sometimes very slow.

Real agent tools (test suites, builds, browsers) have long-tailed latency. A synchronous trainer
waits for the slowest episode of every batch; asynchronous rollouts do not. This wrapper makes
that difference measurable on any env (benchmarks/async_vs_sync.py, tests of the rollout
system) without changing the env's behaviour, only its timing.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

from turnrl.envs.base import StepResult, ToolEnv
from turnrl.types import RewardResult, Task, ToolCall


class LongTailLatency:
    """Wraps a ToolEnv: each ``step`` first sleeps ``fast_s``, or, with probability ``p_slow``,
    a time drawn uniformly from ``slow_s``. Everything else is the wrapped env's."""

    def __init__(
        self,
        env: ToolEnv,
        *,
        fast_s: float = 0.005,
        slow_s: tuple[float, float] = (2.0, 3.0),
        p_slow: float = 0.05,
        seed: int = 0,
    ) -> None:
        assert 0.0 <= p_slow <= 1.0, f"p_slow={p_slow} must be a probability"
        self.env = env
        self.fast_s, self.slow_s, self.p_slow = fast_s, slow_s, p_slow
        self.rng = random.Random(seed)
        self.name = env.name
        self.tools = env.tools

    @property
    def instructions(self) -> str:
        return self.env.instructions

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.env.tool_schemas()

    async def reset(self, task: Task) -> str:
        return await self.env.reset(task)

    async def step(self, call: ToolCall) -> StepResult:
        slow = self.rng.random() < self.p_slow
        await asyncio.sleep(self.rng.uniform(*self.slow_s) if slow else self.fast_s)
        return await self.env.step(call)

    async def grade(self) -> RewardResult:
        return await self.env.grade()

    async def close(self) -> None:
        await self.env.close()


class LatencyFamily:
    """A Family whose envs are wrapped in :class:`LongTailLatency` (tasks, experts unchanged)."""

    def __init__(self, family: Any, **latency: Any) -> None:
        self.family = family
        self.name = family.name
        self.latency = latency
        self._seeds = itertools.count(int(latency.pop("seed", 0)) * 1_000_003)

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        return self.family.tasks(split, n, seed=seed)

    def make_env(self) -> LongTailLatency:
        return LongTailLatency(self.family.make_env(), seed=next(self._seeds), **self.latency)

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> Any:
        return self.family.expert(task, seed=seed, noise=noise)

    def baseline(self, task: Task) -> Any:
        return self.family.baseline(task)

    def close(self) -> None:
        self.family.close()
