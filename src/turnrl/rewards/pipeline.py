"""The run's rubric, assembled from config: the env's grade, per-turn shaping from what the env
measured, the episode screener, and reward functions named by import path (``reward.*``).
:func:`turnrl.rewards.rubric.score_trajectories` then decides every episode's reward, per-turn
rewards, flags and success with it, in training, local eval and endpoint eval alike (the audit,
:mod:`turnrl.rewards.audit`, scores no episode: it measures the tests an env's grade reads).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from turnrl.rewards.rubric import GroupRewardFn, Rubric, Screen
from turnrl.rewards.screeners import RuleScreener
from turnrl.rewards.sources import Shaping, env_reward


def load_function(path: str) -> Any:
    """``"pkg.module:name"`` -> that object (a reward function for a rubric)."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{path!r}: expected an import path 'package.module:function'")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{path!r}: {type(e).__name__}: {e}") from None
    if not callable(obj) and not isinstance(obj, GroupRewardFn):
        raise ValueError(f"{path!r} is not callable")
    return obj


def build_rubric(
    functions: dict[str, float] | None = None,
    *,
    grade_weight: float = 1.0,
    shaping: dict[str, float] | None = None,
    screeners: bool = True,
    zero_flagged: bool = True,
    env_members: Sequence[tuple[Any, float]] | None = None,
) -> Rubric:
    """The run's rubric: the env's grade and its steps' rewards (``grade_weight``), per-turn
    shaping from the env's measures (``shaping``: measure -> weight), the rule-based episode
    screener (``screeners``; a flagged episode gets 0 when ``zero_flagged``), and ``functions``,
    reward functions by import path with their weights (0 = metric only). ``env_members``: the
    env's own reward functions with their weights (a verifiers rubric), in place of its grade,
    each weight times ``grade_weight``."""
    members: list[tuple[Any, float]] = (
        [(fn, w * grade_weight) for fn, w in env_members]
        if env_members is not None
        else [(env_reward, grade_weight)]
    )
    members += [(Shaping(measure), w) for measure, w in (shaping or {}).items()]
    if screeners:
        members.append((Screen(RuleScreener(), zero=zero_flagged), 0.0))
    members += [(load_function(path), w) for path, w in (functions or {}).items()]
    return Rubric(members)
