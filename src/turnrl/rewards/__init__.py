"""Rewards and trust: reward functions and rubrics, judges, episode screeners, the audit.

- :mod:`~turnrl.rewards.rubric`: the reward pipeline: ``Rubric`` (weighted plain functions;
  weight 0 = metric), ``Screen`` (a screener as a member), ``Episode`` (what a reward function
  reads) and ``score_trajectories`` (the one place a reward is decided);
- :mod:`~turnrl.rewards.pipeline`: ``build_rubric``, the run's rubric from its config;
- :mod:`~turnrl.rewards.sources`: the env's grade and per-turn shaping from its measures;
- :mod:`~turnrl.rewards.judge`: ``PointwiseJudge``, ``GroupJudge``, ``BackendChat``;
- :mod:`~turnrl.rewards.screeners`: ``RuleScreener``, ``ModelScreener``;
- :mod:`~turnrl.rewards.audit`: mutation-testing audit of a task set (``turnrl audit``).
"""

from turnrl.rewards.pipeline import build_rubric
from turnrl.rewards.rubric import (
    Episode,
    JudgeError,
    Rubric,
    Screen,
    apply_results,
    score_trajectories,
)

__all__ = [
    "Episode",
    "JudgeError",
    "Rubric",
    "Screen",
    "apply_results",
    "build_rubric",
    "score_trajectories",
]
