"""A broken env stops the run early and says why.

An env whose ``reset`` raises on every episode, or whose tool always hangs, ends every episode
in ENV_ERROR or TIMEOUT. Such episodes carry no reward signal: a run would train on nothing
to its end and report a held-out success of 0. Instead, when more than
``rollout.env_failure_share`` of a step's episodes fail so for ``rollout.env_failure_steps``
steps in a row, :class:`FailureStop` raises :class:`BrokenEnv` quoting the first error, which
names the call and the line of code it came from. The step's rows and checkpoint are written
first, so the run directory stays resumable: fix the env, then ``turnrl train --resume``.

The SFT warm start's expert episodes follow the same rule (:func:`usable_demonstrations`):
failed ones are left out with a line, and past the share the run stops before training.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnrl.envs.scripted import ScriptedEpisode
from turnrl.types import TerminationReason, Trajectory

FAILED = (TerminationReason.ENV_ERROR, TerminationReason.TIMEOUT)


class BrokenEnv(RuntimeError):
    """Most episodes fail in the env: the run stops (its message is one line)."""


def _counts(endings: Sequence[TerminationReason | None]) -> str:
    parts = [f"{sum(e is r for e in endings)} {r.value}" for r in FAILED]
    return ", ".join(p for p in parts if not p.startswith("0 "))


class FailureStop:
    """Counts the steps in a row whose share of failed episodes passes ``share``; raises
    :class:`BrokenEnv` at the ``steps``-th."""

    def __init__(self, env: str, share: float, steps: int) -> None:
        self.env, self.share, self.steps = env, share, steps
        self.streak: list[str] = []  # "failed/episodes" of each step of the streak
        self.first: str | None = None  # the streak's first error

    def after_step(self, trajs: list[Trajectory], step: int) -> None:
        failed = [t for t in trajs if t.termination in FAILED]
        if not trajs or len(failed) / len(trajs) <= self.share:
            self.streak, self.first = [], None
            return
        self.streak.append(f"{len(failed)}/{len(trajs)}")
        self.first = self.first or next((t.error for t in failed if t.error), "no message")
        if len(self.streak) >= self.steps:
            n = len(self.streak)
            raise BrokenEnv(
                f"env {self.env} failed in most episodes of {n} steps in a row (steps "
                f"{step - n + 1}-{step}: {', '.join(self.streak)} ended in env_error or "
                f"timeout; rollout.env_failure_share={self.share:g}); first: {self.first}"
            )


def usable_demonstrations(
    episodes: list[ScriptedEpisode], env: str, share: float, what: str = "expert episodes"
) -> tuple[list[ScriptedEpisode], str | None]:
    """The scripted episodes that ran to their end, and a line saying how many were left out
    (None when none was); raises :class:`BrokenEnv` when more than ``share`` failed, or all."""
    failed = [ep for ep in episodes if ep.failed is not None]
    kept = [ep for ep in episodes if ep.failed is None]
    if not failed:
        return kept, None
    first = next((ep.error for ep in failed if ep.error), "no message")
    counts = _counts([ep.failed for ep in failed])
    if not kept or len(failed) / len(episodes) > share:
        raise BrokenEnv(
            f"warm start: env {env} failed in {len(failed)} of {len(episodes)} {what} "
            f"({counts}; rollout.env_failure_share={share:g}); first: {first}"
        )
    return kept, (
        f"warning: warm start: {len(failed)} of {len(episodes)} {what} ended early "
        f"({counts}) and are left out; first: {first}"
    )
