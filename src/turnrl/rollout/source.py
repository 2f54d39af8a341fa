"""Where a training step's trajectories come from: one interface, three implementations.

The recipe (:func:`turnrl.run.recipe.train`) only ever calls::

    trajs, metrics = source.get_batch(step, timeout_s=...)   # this step's episodes
    ... train on them, policy.version += 1 ...
    source.weights_updated(policy.version)
    source.close()

- :class:`SyncRollouts`: each step's episodes are sampled now, with the current weights, in a
  fresh event loop (the default: ``rollout.workers=local``, ``max_staleness=0``);
- :class:`turnrl.rollout.async_rollout.AsyncRollouts`: episodes keep running on a background
  thread while the trainer updates (``max_staleness`` >= 1, the bound on their lag);
- :class:`turnrl.rollout.ray_workers.RayRollouts`: episodes run in Ray actors
  (``rollout.workers=ray``).

Which tasks a step samples is a pure function of (seed, step) (:func:`sample_requests`), so a
resumed run draws the same episodes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Protocol

from turnrl.chat import ChatRenderer
from turnrl.envs.base import ToolEnv
from turnrl.policy.base import PolicyBackend, SamplingParams
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.types import Task, Trajectory


class RolloutSource(Protocol):
    def get_batch(
        self, step: int, n_trajectories: int | None = None, timeout_s: float | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Step ``step``'s trajectories and the source's metrics for it."""
        ...

    def weights_updated(self, version: int | None = None) -> None:
        """The trainer's weights are now ``version``: push them where episodes sample."""
        ...

    def close(self) -> None: ...


def sample_requests(
    tasks: list[Task], step: int, seed: int, tasks_per_step: int, group_size: int
) -> list[EpisodeRequest]:
    """Tasks and episode seeds for a step, a pure function of (seed, step): resumable."""
    rng = random.Random(f"{seed}-{step}")
    chosen = rng.sample(tasks, min(tasks_per_step, len(tasks)))
    return [
        EpisodeRequest(task, f"s{step}-{task.id}", rng.randrange(2**20))
        for task in chosen
        for _ in range(group_size)
    ]


class SyncRollouts:
    """Each step's episodes, run now with the sampler's current weights. ``share``: this
    process's part of the step's requests (whole groups, for data-parallel ranks)."""

    def __init__(
        self,
        requests: Callable[[int], list[EpisodeRequest]],
        make_env: Callable[[], ToolEnv],
        renderer: ChatRenderer,
        sampler: PolicyBackend,
        params: SamplingParams,
        limits: RolloutLimits,
        *,
        max_concurrency: int = 64,
        batch_wait_s: float = 0.05,
        share: Callable[[list[EpisodeRequest]], list[EpisodeRequest]] | None = None,
    ) -> None:
        self.requests, self.make_env, self.renderer = requests, make_env, renderer
        self.sampler, self.params, self.limits = sampler, params, limits
        self.max_concurrency, self.batch_wait_s = max_concurrency, batch_wait_s
        self.share = share

    def get_batch(
        self, step: int, n_trajectories: int | None = None, timeout_s: float | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        del n_trajectories, timeout_s  # a step's episodes each stop at the episode timeout
        requests = self.requests(step)
        if self.share is not None:
            requests = self.share(requests)
        return asyncio.run(self._collect(requests)), {}

    async def _collect(self, requests: list[EpisodeRequest]) -> list[Trajectory]:
        batcher = GenerationBatcher(self.sampler, self.params, max_wait_s=self.batch_wait_s)
        try:
            return await collect(
                requests, self.make_env, self.renderer, batcher, self.limits, self.max_concurrency
            )
        finally:
            await batcher.close()

    def weights_updated(self, version: int | None = None) -> None:
        """Nothing to push: the sampler samples from the trainer's own weights."""

    def close(self) -> None:
        pass


class NoRollouts:
    """A data-parallel rank other than 0 while rank 0 alone produces (async or Ray): its batch
    arrives in the gather of rank 0's."""

    def get_batch(
        self, step: int, n_trajectories: int | None = None, timeout_s: float | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        return [], {}

    def weights_updated(self, version: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass
