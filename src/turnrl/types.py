"""Core data types shared by environments, rollouts, rewards and training.

A trajectory is one token sequence: the prompt, then for each turn the action the policy
sampled followed by the observation the environment returned. Only sampled tokens carry
gradient, so ``loss_mask`` is 1 exactly on them (the environment's transition probability does
not depend on the policy's parameters).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


class TerminationReason(str, enum.Enum):
    """Why an episode ended.

    Only ``DONE`` is a *termination* (the task's own end: the agent submitted or the env
    finished). Every other reason is a *truncation*: the episode was cut by a limit outside the
    task, so its final reward says nothing certain about the policy and the trainer decides what
    it gets (``mask``, ``zero``, ``keep`` or ``bootstrap``).
    """

    DONE = "done"
    MAX_TURNS = "max_turns"
    CONTEXT_LIMIT = "context_limit"
    TIMEOUT = "timeout"
    ENV_ERROR = "env_error"
    PARSE_ERRORS = "parse_errors"

    @property
    def is_truncation(self) -> bool:
        return self is not TerminationReason.DONE


@dataclass(frozen=True)
class Task:
    """A JSON-serialisable problem: which env runs it and the env-specific payload."""

    id: str
    env: str
    payload: dict[str, Any] = field(default_factory=dict)
    split: str = "train"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Task:
        return cls(**json.loads(line))


@dataclass(frozen=True)
class ToolCall:
    """A tool invocation parsed from action text."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Turn:
    """One action and the observation that followed, as spans of ``Trajectory.token_ids``.

    Spans are half-open ``[start, end)``. ``behavior_logprobs`` has one entry per action token.
    ``anchor`` is the raw environment state after the turn (hashable), used by GiGPO to form
    step groups.

    What the env reported (``env_reward``: the rewards its steps returned; ``measures``: what it
    measured of its state after the turn, ``ToolEnv.measure()``) is evidence; ``reward``, the
    per-turn reward the trainer uses, is decided from it by the run's rubric
    (:func:`turnrl.rewards.rubric.score_trajectories`), like the episode's final reward.
    """

    action_start: int
    action_end: int
    obs_start: int
    obs_end: int
    behavior_logprobs: list[float]
    policy_version: int
    reward: float = 0.0  # decided by the rubric; 0.0 until the episode is scored
    anchor: Any = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_error: str | None = None
    # the action did not parse, or the env rejected a call as malformed (unknown tool, bad
    # arguments): it changed nothing, so it earns no positive credit (see no_credit_for_malformed)
    malformed: bool = False
    env_reward: float = 0.0  # sum of StepResult.reward over the turn's calls
    measures: dict[str, float] = field(default_factory=dict)  # env.measure() after the turn


@dataclass
class Trajectory:
    """One episode as the trainer sees it.

    Invariants (checked by :meth:`validate`): ``token_ids``, ``loss_mask``,
    ``behavior_logprobs`` and ``policy_versions`` have the same length; ``loss_mask`` is 1
    exactly on the action spans of ``turns``; ``behavior_logprobs`` is 0.0 and
    ``policy_versions`` is -1 wherever ``loss_mask`` is 0.

    Segments: a context strategy that rewrites the context (``rollout.context``) splits the
    episode into segments, stored one after the other in ``token_ids``. Segment j is
    ``token_ids[s_j:s_{j+1}]`` with ``s_0 = 0`` and ``s_j = segment_starts[j-1]``; it opens with
    a freshly rendered prefix (mask 0) and every token sampled in it was sampled from exactly
    the tokens before it *in the segment*, so the trainer scores each segment as its own
    sequence. Turn spans stay absolute and never cross a boundary; each segment holds at least
    one action. The episode (reward, group, ending) is still one episode: only the last segment
    carries its ending.
    """

    task_id: str
    group_id: str
    prompt_len: int
    token_ids: list[int]  # [T] prompt + a1 + o1 + a2 + o2 ...
    loss_mask: list[int]  # [T] 1 on sampled tokens
    behavior_logprobs: list[float]  # [T] sampler's logprob of each sampled token
    policy_versions: list[int]  # [T] version that sampled each token, -1 elsewhere
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    termination: TerminationReason = TerminationReason.DONE
    error: str | None = None
    flags: list[str] = field(default_factory=list)  # exploit flags from the grader/screeners
    metrics: dict[str, float] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    # env.grade() as it returned (None when the episode ended without one); ``reward`` is what
    # the run's rubric decided from it (turnrl.rewards.rubric.score_trajectories)
    graded: RewardResult | None = None
    # offsets in token_ids where a rewritten context starts; empty: one segment (no rewrite)
    segment_starts: list[int] = field(default_factory=list)
    # env.measure() right after reset: where per-turn shaping starts (Turn.measures after each)
    reset_measures: dict[str, float] = field(default_factory=dict)

    def segments(self) -> list[tuple[int, int]]:
        """Half-open ``[start, end)`` spans of the segments in ``token_ids``."""
        starts = [0, *self.segment_starts]
        return list(zip(starts, [*self.segment_starts, len(self.token_ids)]))

    @property
    def truncated(self) -> bool:
        return self.termination.is_truncation

    @property
    def excluded(self) -> bool:
        """The reward is unknown, not low: the env raised, the wall clock ran out, the worker
        running it was lost, or a weighted reward function failed (all ``ENV_ERROR`` or
        ``TIMEOUT``). Such an episode says nothing about the policy, so it leaves its group's
        statistics and the loss."""
        return self.termination in (TerminationReason.ENV_ERROR, TerminationReason.TIMEOUT)

    @property
    def num_action_tokens(self) -> int:
        return sum(self.loss_mask)

    def validate(self) -> None:
        n = len(self.token_ids)
        assert len(self.loss_mask) == n, f"loss_mask has {len(self.loss_mask)} != {n} tokens"
        assert len(self.behavior_logprobs) == n, "behavior_logprobs misaligned with token_ids"
        assert len(self.policy_versions) == n, "policy_versions misaligned with token_ids"
        expected = [0] * n
        for turn in self.turns:
            assert turn.action_end - turn.action_start == len(turn.behavior_logprobs), (
                "turn logprobs do not cover its action span"
            )
            for i in range(turn.action_start, turn.action_end):
                expected[i] = 1
        assert expected == list(self.loss_mask), "loss_mask is not 1 exactly on action spans"
        for i, m in enumerate(self.loss_mask):
            if not m:
                assert self.behavior_logprobs[i] == 0.0 and self.policy_versions[i] == -1, (
                    f"token {i} is not sampled but carries a logprob or version"
                )
        if self.segment_starts:
            bounds = [0, *self.segment_starts, n]
            assert all(a < b for a, b in zip(bounds, bounds[1:])), (
                f"segment_starts {self.segment_starts} are not increasing inside (0, {n})"
            )
            for start, end in self.segments():
                assert self.loss_mask[start] == 0, f"segment at {start} opens on a sampled token"
                inside = [t for t in self.turns if start <= t.action_start < end]
                assert inside, f"segment [{start}, {end}) holds no action"
                for t in inside:
                    assert t.action_end <= end and start <= t.obs_start <= t.obs_end <= end, (
                        f"turn spans cross the segment boundary at {end}"
                    )


# Flags that record a finding about an episode, not an attempt to cheat: a screener that
# failed, a fix that passes only the visible tests, a reward that was not a number. They stay
# on the trajectory and in its record, but never count as a hack (``hack_rate``, ``hacked``).
FINDINGS = frozenset({"screener_error", "visible_only", "non_finite_reward"})


def is_hack(flags: Iterable[str]) -> bool:
    """Some flag is evidence of tampering or looked-up answers, not only a finding."""
    return any(f not in FINDINGS for f in flags)


@dataclass
class RewardResult:
    """A graded episode. ``reward`` is what training sees; ``success`` is the true outcome
    (hidden tests, goal state) and ``proxy_success`` what the agent could see (visible tests).
    Every component and exploit flag is kept so rewards can be audited. ``turn_rewards``, when
    given, holds one per-turn (process) reward for each of the episode's turns."""

    reward: float
    success: bool
    proxy_success: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    turn_rewards: list[float] | None = None
