"""The run's rubric, assembled from config: the env's grade, the episode screener, and reward
functions named by import path (``reward.*``). :func:`turnrl.rewards.rubric.score_trajectories`
then decides every episode's reward, flags and success with it, in training, local eval,
endpoint eval and audit alike.
"""

from __future__ import annotations

import importlib
from typing import Any

from turnrl.rewards.rubric import GroupRewardFn, Rubric, Screen
from turnrl.rewards.screeners import RuleScreener
from turnrl.rewards.sources import env_reward


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
    screeners: bool = True,
    zero_flagged: bool = True,
) -> Rubric:
    """The run's rubric: the env's grade (``grade_weight``), the rule-based episode screener
    (``screeners``; a flagged episode gets 0 when ``zero_flagged``), and ``functions``, reward
    functions by import path with their weights (0 = metric only)."""
    members: list[tuple[Any, float]] = [(env_reward, grade_weight)]
    if screeners:
        members.append((Screen(RuleScreener(), zero=zero_flagged), 0.0))
    members += [(load_function(path), w) for path, w in (functions or {}).items()]
    return Rubric(members)
