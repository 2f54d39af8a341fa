"""Context strategies: what an episode does when its context outgrows a token threshold.

* ``truncate``: nothing; the episode ends with ``CONTEXT_LIMIT`` when the next generation or
  observation would not fit in ``max_context_tokens``.
* ``drop_observations``: once the context passes ``threshold`` tokens, every tool result but
  the last ``keep_observations`` becomes a short placeholder, and the episode continues from
  that rewritten conversation.
* ``summarize``: the observation that takes the context past ``threshold`` tokens also asks
  for a summary; the policy writes it on its next turn (sampled, so trained like any action,
  in the context that produced it), and the episode continues from a fresh context holding
  the task and the summary. With ``summarizer`` set, a frozen model writes it instead
  (:mod:`turnrl.rollout.summarizer`): the policy is not asked, and the summary is an
  observation (mask 0) in the next segment's prefix.

A rewrite never edits tokens in place: the rewritten context is the prefix of a new
*segment* (mask 0), and every later token is sampled from that prefix. ``drop_observations``
builds it by splicing token ids (what the policy sampled stays the ids it sampled);
``summarize`` renders the task and the summary afresh. The
trainer scores each segment as its own sequence (``Trajectory.segment_starts``), so each
sampled token is trained on exactly the context it was sampled from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ContextStrategy = Literal["truncate", "drop_observations", "summarize"]
STRATEGIES: tuple[str, ...] = ("truncate", "drop_observations", "summarize")

PLACEHOLDER = "[older tool result removed to save context]"
SUMMARY_REQUEST = (
    "Your context is almost full. Write a short summary of the task and of everything you "
    "found so far that you still need (names, numbers, what is left to do). Do not call a "
    "tool. From now on you will see only the task and this summary."
)
SUMMARY_HEADER = "Summary of your work so far (the earlier turns were removed):"


@dataclass(frozen=True)
class ContextConfig:
    """How an episode's context is managed (``rollout.context*`` in the run config)."""

    strategy: ContextStrategy = "truncate"
    # tokens: a context longer than this is rewritten before the next turn (not for truncate)
    threshold: int = 768
    keep_observations: int = 1  # drop_observations: the most recent tool results kept whole
    summary_max_tokens: int = 128  # summarize: the summary's generation budget
    # summarize: a frozen model (name or path) writes the summary as an observation; None: the
    # policy writes it (sampled and trained)
    summarizer: str | None = None

    def check(self, max_context_tokens: int) -> list[str]:
        """Problems with these settings, each naming its field (empty when fine)."""
        errors = []
        if self.strategy not in STRATEGIES:
            errors.append(f"context={self.strategy!r}: expected one of {', '.join(STRATEGIES)}")
        if self.strategy != "truncate" and not 0 < self.threshold < max_context_tokens:
            errors.append(
                f"context_threshold={self.threshold} must be > 0 and below "
                f"max_context_tokens={max_context_tokens}"
            )
        elif self.policy_summarizes and self.threshold + self.summary_max_tokens >= (
            max_context_tokens
        ):
            errors.append(
                f"context_threshold + summary_max_tokens = "
                f"{self.threshold + self.summary_max_tokens} leaves no room for the summary "
                f"below max_context_tokens={max_context_tokens}"
            )
        if self.summarizer is not None and self.strategy != "summarize":
            errors.append(
                f"summarizer={self.summarizer!r} is only used with context=summarize, "
                f"not {self.strategy}"
            )
        if self.keep_observations < 0:
            errors.append(f"keep_observations={self.keep_observations} must be >= 0")
        return errors

    def due(self, context_tokens: int) -> bool:
        """drop_observations: whether the context must be rewritten before the next turn."""
        return self.strategy == "drop_observations" and context_tokens > self.threshold

    def asks_summary(self, context_tokens: int) -> bool:
        """summarize: whether the observation that brings the context to ``context_tokens``
        must also ask for a summary (the policy writes it on its next turn)."""
        return self.strategy == "summarize" and context_tokens > self.threshold

    @property
    def policy_summarizes(self) -> bool:
        return self.strategy == "summarize" and self.summarizer is None


def drop_old_observations(
    parts: list[tuple[list[int], bool]], placeholder: list[int], keep: int
) -> list[tuple[list[int], bool]]:
    """The context's pieces (token ids, whether a tool result) with every tool result but the
    last ``keep`` replaced by ``placeholder`` (the ids of a placeholder tool result); the
    prompt and the agent's own turns stay exactly as they are. A replaced piece is no longer
    a tool result, so a later rewrite leaves it alone."""
    tool_at = [i for i, (_, is_tool) in enumerate(parts) if is_tool]
    drop = set(tool_at[: max(len(tool_at) - keep, 0)])
    return [(list(placeholder), False) if i in drop else part for i, part in enumerate(parts)]


def summary_context(messages: list[dict[str, Any]], summary: str) -> list[dict[str, Any]]:
    """A fresh conversation: the episode's system message and its task (its first two
    messages), the task followed by the summary."""
    system, task = messages[0], messages[1]
    return [system, {**task, "content": f"{task['content']}\n\n{SUMMARY_HEADER}\n{summary}"}]
