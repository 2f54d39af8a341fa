"""What a rubric reads from the env: its grade, the rewards its steps returned, and per-turn
shaping from what it measured of its state.

Judges (a model scores a transcript) live in :mod:`turnrl.rewards.judge`; screeners in
:mod:`turnrl.rewards.screeners`. Each function here is a rubric member (``fn(episode)``) and
returns a ``RewardResult`` whose ``components`` say how the value was reached.
"""

from __future__ import annotations

from turnrl.rewards.rubric import Episode
from turnrl.types import RewardResult


def env_reward(episode: Episode) -> RewardResult:
    """The env's grade as it is, with the rewards its steps returned as per-turn rewards (to
    combine them with shaping, judges or metrics under one weight)."""
    if episode.graded is None:
        raise ValueError("episode has no env grade (Episode.graded is None)")
    g = episode.graded
    return RewardResult(
        reward=g.reward,
        success=g.success,
        proxy_success=g.proxy_success,
        components=g.components,
        flags=g.flags,
        info=g.info,
        turn_rewards=[t.env_reward for t in episode.trajectory.turns],
    )


class Shaping:
    """Per-turn rewards from the change of one measure of the env's state (``env.measure()``):

        r_k = Φ(s_k) - Φ(s_{k-1}),   Φ(s_0) = the measure right after reset

    potential-based shaping (Ng, Harada & Russell, 1999): the turns' rewards sum to Φ(s_K) -
    Φ(s_0), so no detour earns more than going straight to the goal. A turn the env did not
    measure (a summary) left the state as it was: r_k = 0. It adds nothing to the final reward;
    its component is the shaped return. Raises (the episode's reward is then unknown) when the
    env never measured ``measure``."""

    def __init__(self, measure: str) -> None:
        self.measure = measure
        self.name = f"shaping_{measure}"

    def __call__(self, episode: Episode) -> RewardResult:
        t = episode.trajectory
        if self.measure not in t.reset_measures:
            raise KeyError(f"the env measures no {self.measure!r} (env.measure() at reset)")
        before = t.reset_measures[self.measure]
        rewards = []
        for turn in t.turns:
            after = turn.measures.get(self.measure, before)
            rewards.append(after - before)
            before = after
        shaped = sum(rewards)
        return RewardResult(
            reward=0.0,
            success=False,
            components={"return": shaped},
            turn_rewards=rewards,
        )
