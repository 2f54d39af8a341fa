"""Evaluation: success, pass@k and pass^k on held-out tasks, and scripted baselines."""

from __future__ import annotations

import asyncio
import math
import statistics
from dataclasses import dataclass

from turnrl.chat import ChatRenderer
from turnrl.envs.registry import Family
from turnrl.envs.scripted import run_scripted
from turnrl.policy.base import PolicyBackend, SamplingParams
from turnrl.rewards.rubric import Rubric, build_rubric, score_trajectories_async
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.train.config import TrainConfig
from turnrl.types import Task, TerminationReason, Trajectory


@dataclass
class EvalResult:
    success: float  # mean true success over all episodes
    success_stderr: float  # standard error of ``success`` over the tasks drawn (success_stderr())
    pass_at_k: float  # share of tasks with at least one success in k tries
    pass_hat_k: float  # share of tasks where all k tries succeed (tau-bench's pass^k)
    reward: float
    turns: float
    hack_rate: float
    truncation_rate: float
    k: int
    episodes: int
    # mean proxy success (what the training reward's tests say) where the env grades one,
    # next to ``success`` to measure reward drift on held-out tasks; None where it grades none
    proxy_success: float | None = None
    # episodes the env cut (they score 0): past their time limit, and raised in the env
    timeouts: int = 0
    env_errors: int = 0

    def as_metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}/{k}": float(v) for k, v in self.__dict__.items() if v is not None}


def eval_seed(cfg: TrainConfig) -> int:
    """The sampling seed of held-out evaluation, in the run and in ``turnrl eval`` alike: with
    the same tasks (``env.eval_tasks`` of the test split) both sample the same episodes, so a
    checkpoint scores the same in either (apart from batching's float noise)."""
    return cfg.seed + 7


def success_stderr(per_task: list[float]) -> float:
    """Standard error of the mean success, with tasks as the sampled unit.

        se = sqrt( sum_t (s_t - s)^2 / T ) / sqrt(T),   s = sum_t s_t / T

    with s_t the mean success of task t's k episodes and T tasks. Why report it: held-out
    success at temperature 1 on a few dozen tasks moves by several points between two sampling
    seeds (0.062 and 0.150 for one model on the same 80 tasks), so a gain must be read against it. With k > 1 the episodes of one task are not independent,
    hence per task, not per episode.
    """
    if not per_task:
        return 0.0
    return statistics.pstdev(per_task) / math.sqrt(len(per_task))


def summarize(trajs: list[Trajectory], k: int) -> EvalResult:
    by_task: dict[str, list[bool]] = {}
    for t in trajs:
        by_task.setdefault(t.task_id, []).append(t.metrics.get("success", 0.0) > 0)
    n = max(len(trajs), 1)
    proxies = [t.metrics["proxy_success"] for t in trajs if "proxy_success" in t.metrics]
    return EvalResult(
        success=sum(t.metrics.get("success", 0.0) for t in trajs) / n,
        success_stderr=success_stderr([sum(v) / len(v) for v in by_task.values()]),
        pass_at_k=sum(any(v) for v in by_task.values()) / max(len(by_task), 1),
        pass_hat_k=sum(all(v) for v in by_task.values()) / max(len(by_task), 1),
        reward=sum(t.reward for t in trajs) / n,
        turns=sum(len(t.turns) for t in trajs) / n,
        hack_rate=sum(bool(t.flags) for t in trajs) / n,
        truncation_rate=sum(t.truncated for t in trajs) / n,
        k=k,
        episodes=len(trajs),
        proxy_success=sum(proxies) / len(proxies) if proxies else None,
        timeouts=sum(t.termination is TerminationReason.TIMEOUT for t in trajs),
        env_errors=sum(t.termination is TerminationReason.ENV_ERROR for t in trajs),
    )


async def evaluate_policy(
    family: Family,
    tasks: list[Task],
    renderer: ChatRenderer,
    backend: PolicyBackend,
    params: SamplingParams,
    limits: RolloutLimits,
    k: int = 1,
    seed: int = 0,
    batch_wait_s: float = 0.05,
    rubric: Rubric | None = None,
) -> tuple[EvalResult, list[Trajectory]]:
    """Run k episodes per task with the policy, decide their rewards with ``rubric`` (the run's;
    default: the env's grade and the rule screener) and summarise them."""
    requests = [
        EpisodeRequest(task, f"eval-{task.id}", seed * 100_000 + i * k + j)
        for i, task in enumerate(tasks)
        for j in range(k)
    ]
    batcher = GenerationBatcher(backend, params, max_wait_s=batch_wait_s)
    try:
        trajs = await collect(requests, family.make_env, renderer, batcher, limits)
    finally:
        await batcher.close()
    await score_trajectories_async(trajs, rubric if rubric is not None else build_rubric())
    return summarize(trajs, k), trajs


async def evaluate_scripted(
    family: Family, tasks: list[Task], which: str = "baseline", seed: int = 0
) -> float:
    """Mean true success of a scripted agent: ``baseline`` (do nothing), ``random`` or ``expert``."""

    async def one(i: int, task: Task) -> float:
        try:
            if which == "baseline":
                agent = family.baseline(task)
            elif which == "random":
                agent = family.random_agent(task, seed=seed + i)  # type: ignore[attr-defined]
            else:
                agent = family.expert(task, seed=seed + i)
            env = family.make_env()
        except Exception:  # a scripted agent that cannot start scores 0, as a failed episode
            return 0.0
        ep = await run_scripted(env, task, agent)  # a failed episode has no result: 0
        return float(ep.result.success) if ep.result else 0.0

    gate = asyncio.Semaphore(16)

    async def gated(i: int, task: Task) -> float:
        async with gate:
            return await one(i, task)

    scores = await asyncio.gather(*(gated(i, t) for i, t in enumerate(tasks)))
    return sum(scores) / max(len(scores), 1)
