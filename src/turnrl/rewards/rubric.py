"""The reward pipeline: ``env.grade()`` -> a :class:`Rubric` -> ``trajectory.reward``.

:func:`score_trajectories` is the one place a reward is decided, for training and evaluation
alike. Each finished episode's grade (``trajectory.graded``) goes through the run's rubric
(:func:`turnrl.rewards.pipeline.build_rubric`: the env's grade, per-turn shaping from what the
env measured, the episode screeners, any functions the config adds), and the result is written
onto the trajectory: its reward, flags and success, and the reward of each of its turns. An
episode the env could not grade (an env error, the wall clock, a lost worker) is not scored: it
keeps ``reward`` 0.0 as a placeholder, ``trajectory.excluded`` is true, and the trainer leaves it
out of its group by default.

A reward function is a plain callable (verifiers style) that reads one finished
:class:`Episode` and returns a ``float``/``bool`` or a :class:`~turnrl.types.RewardResult`
(sync or async). A *group* reward function instead has ``async score_group(episodes)`` and is
called once per group (a relative judge). ``Rubric([(fn, weight), ...])`` combines them:

    reward = sum_i w_i * r_i        over functions with w_i != 0

A weight-0 function is a metric: its value is recorded in ``components`` but never rewarded.
Per-turn (process) rewards combine the same way: a function whose RewardResult carries
``turn_rewards`` (one per turn) adds ``w_i * turn_rewards`` to the turns' rewards.

A :class:`Screen` member wraps an episode screener: it always adds its flags, and when one of
them is a hack (not ``screener_error``) the episode's reward becomes the screen's ``penalty``
(0.0 by default) whatever the other members gave.

Failures are never a silent 0. A function that raises is recorded in ``info["errors"]``; if it
had a weight, the result is marked ``info["skipped"] = True`` (and ``info["judge_skipped"]``
when a judge failed), ``reward`` is 0.0 only as a placeholder, and :func:`apply_results` turns
the trajectory into an ``ENV_ERROR``, excluded from its group like any episode whose reward is
unknown. A metric-only function that raises is recorded and nothing is skipped. A value that is
not finite (NaN or ±inf, final or per-turn) is such a failure too, and flags the episode
``non_finite_reward``.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from turnrl.types import RewardResult, Task, TerminationReason, Trajectory, is_hack

RewardValue = float | bool | RewardResult
RewardFn = Callable[["Episode"], RewardValue | Awaitable[RewardValue]]


SCREENER_ERROR = "screener_error"  # a screener failed: recorded, never zeroes a reward
NON_FINITE = "non_finite_reward"  # a reward function gave NaN or ±inf: the reward is unknown


class JudgeError(RuntimeError):
    """A judge model failed or replied with something unparseable: the score is unknown."""


class NonFiniteReward(ValueError):
    """A reward function gave NaN or ±inf (final or per-turn)."""


@dataclass
class Episode:
    """What a reward function reads: the trajectory, its task and the env's own grade."""

    trajectory: Trajectory
    task: Task | None = None
    graded: RewardResult | None = None  # env.grade() of this episode, when available

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.trajectory.messages

    def final_text(self) -> str:
        """The last assistant message (the answer, for single-answer rubrics)."""
        for m in reversed(self.trajectory.messages):
            if m.get("role") == "assistant":
                return str(m.get("content", ""))
        return ""


@runtime_checkable
class GroupRewardFn(Protocol):
    """Scores a whole group in one call (relative judging); returns one value per episode."""

    async def score_group(self, episodes: list[Episode]) -> list[RewardValue]: ...


def fn_name(fn: Any) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__


class Screen:
    """Rubric member around an episode screener (anything with ``screen(trajectory) -> flags``,
    sync or async). Its value is 1.0 when it flagged a hack; it is a metric (weight 0), but a
    flagged hack sets the episode's reward to ``penalty`` when ``zero`` is true. A screener
    that raises gives the ``screener_error`` flag and never zeroes a reward."""

    def __init__(self, screener: Any, *, zero: bool = True, penalty: float = 0.0) -> None:
        if not callable(getattr(screener, "screen", None)):
            raise ValueError(f"Screen: {screener!r} has no screen(trajectory) method")
        self.screener, self.zero, self.penalty = screener, zero, float(penalty)
        self.name = f"screen_{getattr(screener, 'name', type(screener).__name__)}"

    async def __call__(self, episode: Episode) -> RewardResult:
        try:
            flags = self.screener.screen(episode.trajectory)
            if inspect.isawaitable(flags):
                flags = await flags
            flags = list(flags)
        except Exception:
            flags = [SCREENER_ERROR]
        hacked = is_hack(flags)
        return RewardResult(reward=float(hacked), success=not hacked, flags=flags)


@dataclass
class _Outcome:
    value: RewardValue | None = None
    error: BaseException | None = None


class Rubric:
    """Weighted reward functions. ``funcs`` holds ``(fn, weight)`` pairs or bare functions
    (weight 1). Names come from ``fn.name`` or ``fn.__name__`` and must be unique.

    ``success`` of a result is the env's graded success when the episode has one, else
    ``reward >= success_threshold``.
    """

    def __init__(
        self,
        funcs: Sequence[tuple[Any, float] | Any],
        *,
        success_threshold: float = 1.0,
    ) -> None:
        pairs = [
            f if isinstance(f, tuple) else (f, 0.0 if isinstance(f, Screen) else 1.0) for f in funcs
        ]
        if not pairs:
            raise ValueError("Rubric needs at least one reward function")
        problems = []
        for fn, w in pairs:
            if not callable(fn) and not isinstance(fn, GroupRewardFn):
                problems.append(f"{fn!r} is neither callable nor has score_group")
            if not isinstance(w, int | float) or w != w:
                problems.append(f"weight of {fn_name(fn)} must be a number, got {w!r}")
            elif isinstance(fn, Screen) and w != 0:
                problems.append(f"{fn_name(fn)} is a screen: its weight must be 0, got {w!r}")
        names = [fn_name(fn) for fn, _ in pairs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate reward function names {dupes}; set .name to tell apart")
        if problems:
            raise ValueError("Rubric: " + "; ".join(problems))
        self.funcs = [(fn, float(w)) for fn, w in pairs]
        self.names = names
        self.success_threshold = success_threshold

    async def score_group(self, episodes: list[Episode]) -> list[RewardResult]:
        """Score one group; group functions are called once, the others per episode, all
        concurrently."""
        columns = await asyncio.gather(*(_run(fn, episodes) for fn, _ in self.funcs))
        return [self._combine(ep, [col[i] for col in columns]) for i, ep in enumerate(episodes)]

    async def score(self, episode: Episode) -> RewardResult:
        return (await self.score_group([episode]))[0]

    async def score_batch(self, episodes: list[Episode]) -> list[RewardResult]:
        """Score a batch, grouping by ``trajectory.group_id``; results in input order."""
        groups: dict[str, list[int]] = {}
        for i, ep in enumerate(episodes):
            groups.setdefault(ep.trajectory.group_id, []).append(i)
        scored = await asyncio.gather(
            *(self.score_group([episodes[i] for i in idx]) for idx in groups.values())
        )
        out: list[RewardResult | None] = [None] * len(episodes)
        for idx, results in zip(groups.values(), scored):
            for i, r in zip(idx, results):
                out[i] = r
        return out  # type: ignore[return-value]

    def _combine(self, ep: Episode, outcomes: list[_Outcome]) -> RewardResult:
        reward = 0.0
        n_turns = len(ep.trajectory.turns)
        turn_rewards = [0.0] * n_turns  # sum_i w_i * turn_rewards_i
        components: dict[str, float] = {}
        flags: list[str] = []
        errors: dict[str, str] = {}
        details: dict[str, Any] = {}  # info of functions that returned a RewardResult
        skipped = judge_skipped = False
        screened: float | None = None  # the penalty of the first screen that flagged a hack
        screen_flags: dict[str, list[str]] = {}
        for name, (fn, w), out in zip(self.names, self.funcs, outcomes):
            value = out.value
            per_turn = value.turn_rewards if isinstance(value, RewardResult) else None
            if out.error is None and per_turn is not None and len(per_turn) != n_turns:
                out = _Outcome(
                    error=ValueError(f"{len(per_turn)} turn rewards for {n_turns} turns")
                )
            if out.error is not None:
                errors[name] = f"{type(out.error).__name__}: {out.error}"
                if isinstance(out.error, JudgeError):
                    judge_skipped = True
                    components[f"{name}/skipped"] = 1.0
                if isinstance(out.error, NonFiniteReward) and w != 0.0 and NON_FINITE not in flags:
                    flags.append(NON_FINITE)
                skipped = skipped or w != 0.0
                continue
            if isinstance(value, RewardResult):
                r = float(value.reward)
                for k, v in value.components.items():
                    components[f"{name}/{k}"] = float(v)
                flags += [f for f in value.flags if f not in flags]
                if isinstance(fn, Screen):
                    screen_flags[name] = list(value.flags)
                if value.info:
                    details[name] = value.info
            else:
                r = float(value)  # type: ignore[arg-type]
            components[name] = r
            if w != 0.0:
                reward += w * r
                for k, r_k in enumerate(per_turn or ()):
                    turn_rewards[k] += w * r_k
            if isinstance(fn, Screen) and fn.zero and r and screened is None:
                screened = fn.penalty
        if screened is not None:  # a screened-out episode earns nothing, per turn neither
            reward, turn_rewards = screened, [0.0] * n_turns
        info: dict[str, Any] = {
            "skipped": skipped,
            "judge_skipped": judge_skipped,
            "screened": screened is not None,
        }
        if screen_flags:
            info["screen_flags"] = screen_flags
        if errors:
            info["errors"] = errors
        if details:
            info["details"] = details
        graded = ep.graded
        if graded is not None:
            flags += [f for f in graded.flags if f not in flags]
        return RewardResult(
            reward=0.0 if skipped else reward,
            success=graded.success if graded is not None else reward >= self.success_threshold,
            proxy_success=graded.proxy_success if graded is not None else None,
            components=components,
            flags=flags,
            info=info,
            turn_rewards=[0.0] * n_turns if skipped else turn_rewards,
        )


async def _run(fn: Any, episodes: list[Episode]) -> list[_Outcome]:
    """Call ``fn`` on every episode (or once on the group), catching its errors."""
    if isinstance(fn, GroupRewardFn):
        try:
            values = list(await fn.score_group(episodes))
            if len(values) != len(episodes):
                raise JudgeError(f"{fn_name(fn)} returned {len(values)} scores for {len(episodes)}")
            return [_Outcome(_checked(v)) for v in values]
        except Exception as e:  # recorded per episode, never a silent 0
            return [_Outcome(error=e) for _ in episodes]

    async def one(ep: Episode) -> _Outcome:
        try:
            value = fn(ep)
            if inspect.isawaitable(value):
                value = await value
            return _Outcome(_checked(value))
        except Exception as e:
            return _Outcome(error=e)

    return list(await asyncio.gather(*(one(ep) for ep in episodes)))


def _checked(value: Any) -> RewardValue:
    if isinstance(value, RewardResult):
        values = [value.reward, *(value.turn_rewards or ())]
    elif isinstance(value, bool | int | float):
        values = [value]
    else:
        raise TypeError(f"reward function returned {value!r}; expected a number or RewardResult")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise NonFiniteReward(f"reward {bad[0]}")
    return value


def apply_results(trajs: list[Trajectory], results: list[RewardResult]) -> dict[str, float]:
    """Write rubric results onto trajectories and return batch metrics.

    Sets ``reward`` and each turn's ``reward``, merges ``flags``, records every component as
    ``metrics["reward/<name>"]`` and ``metrics["hacked"]`` (a flag that is not a finding,
    ``types.FINDINGS``). A skipped result (a
    weighted function failed) becomes ``termination=ENV_ERROR`` with the errors in
    ``trajectory.error``: its reward is unknown, so it is excluded from its group, and
    ``reward/skipped_rate`` counts it.
    """
    assert len(trajs) == len(results), f"{len(trajs)} trajectories but {len(results)} results"
    n = max(len(trajs), 1)
    sums: dict[str, float] = {}
    skipped = judge_skipped = 0
    for t, r in zip(trajs, results):
        t.reward = r.reward
        for turn, r_k in zip(t.turns, r.turn_rewards or [0.0] * len(t.turns)):
            turn.reward = r_k
        t.flags += [f for f in r.flags if f not in t.flags]
        t.metrics["success"] = float(r.success)
        t.metrics["hacked"] = float(is_hack(t.flags))
        if r.proxy_success is not None:
            t.metrics["proxy_success"] = float(r.proxy_success)
        for k, v in r.components.items():
            t.metrics[f"reward/{k}"] = v
            sums[k] = sums.get(k, 0.0) + v
        if r.info.get("skipped"):
            skipped += 1
            t.metrics["reward/skipped"] = 1.0
            t.termination = TerminationReason.ENV_ERROR
            t.error = f"reward skipped: {r.info.get('errors', {})}"
        judge_skipped += bool(r.info.get("judge_skipped"))
    metrics = {f"rubric/{k}": v / n for k, v in sums.items()}
    metrics["reward/skipped_rate"] = skipped / n
    metrics["judge/skipped"] = float(judge_skipped)
    return metrics


def score_trajectories(
    trajs: list[Trajectory], rubric: Rubric, warn: Callable[[str], None] | None = None
) -> dict[str, float]:
    """Decide the reward of every trajectory: each graded episode through ``rubric``, written
    back by :func:`apply_results`; episodes without a grade stay excluded. Returns the batch's
    reward metrics: the rubric's means, ``screen/<flag>`` and ``screen/flagged_rate``, and
    ``reward/excluded_rate`` with its causes (``reward/env_error_rate``, ``reward/timeout_rate``)
    over all of ``trajs``. ``warn`` gets one line for each episode whose reward came out
    non-finite (it is left out of its group). Call it outside an event loop (the training loop,
    the eval CLI); inside one, await :func:`score_trajectories_async`."""
    return asyncio.run(score_trajectories_async(trajs, rubric, warn))


async def score_trajectories_async(
    trajs: list[Trajectory], rubric: Rubric, warn: Callable[[str], None] | None = None
) -> dict[str, float]:
    graded = [t for t in trajs if t.graded is not None and not t.excluded]
    results = await rubric.score_batch([Episode(t, graded=t.graded) for t in graded])
    metrics = apply_results(graded, results)
    for t, r in zip(graded, results):
        if warn is not None and NON_FINITE in r.flags:
            warn(
                f"warning: task {t.task_id}: non-finite reward ({r.info.get('errors')}); "
                "the episode is left out of its group"
            )
    n = max(len(trajs), 1)
    for key in list(metrics):
        if key.startswith("rubric/") or key == "reward/skipped_rate":
            metrics[key] *= len(graded) / n  # per episode of the batch, not of those graded
    for r in results:
        for f in {f for flags in r.info.get("screen_flags", {}).values() for f in flags}:
            metrics[f"screen/{f}"] = metrics.get(f"screen/{f}", 0.0) + 1.0 / n
    hacked = [
        is_hack(f for flags in r.info.get("screen_flags", {}).values() for f in flags)
        for r in results
    ]
    metrics["screen/flagged_rate"] = sum(hacked) / n
    metrics["reward/excluded_rate"] = sum(t.excluded for t in trajs) / n
    for reason in (TerminationReason.ENV_ERROR, TerminationReason.TIMEOUT):
        metrics[f"reward/{reason.value}_rate"] = sum(t.termination is reason for t in trajs) / n
    return metrics
