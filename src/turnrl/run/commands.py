"""The CLI's commands other than training, evaluation and export, over the library's blocks.

``cli.py`` talks only to :mod:`turnrl.run`; these functions are what it calls for the smaller
commands (``envs``, ``doctor``, ``audit``, ``check-template``) and for an endpoint agent. Each
imports its block when called, so ``turnrl envs`` starts without torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from turnrl.chat import ChatRenderer, TemplateError
from turnrl.policy.openai import OpenAIChat, OpenAIError
from turnrl.run.config import TrainConfig

__all__ = [
    "OpenAIChat",
    "OpenAIError",
    "TemplateError",
    "audit",
    "check_template",
    "doctor",
    "env_listing",
    "parse_kinds",
]


def check_template(model: str, tool_format: Any = "auto") -> ChatRenderer:
    """``model``'s tokenizer and chat template against the token-exact contract."""
    from turnrl.chat import check_model_template

    return check_model_template(model, tool_format)


def env_listing() -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """(shipped envs, installed envs, their entry-point group) as (name, description) rows."""
    from turnrl.envs.registry import ENTRY_POINT_GROUP, SHIPPED, installed_envs

    shipped = [(name, text) for name, (_, text) in SHIPPED.items()]
    return shipped, list(installed_envs().items()), ENTRY_POINT_GROUP


def doctor(cfg: TrainConfig, tasks: int, console: Any) -> bool:
    """``turnrl doctor``: every env check, printed; whether none failed."""
    from turnrl.envs.doctor import print_checks, run_doctor
    from turnrl.run.preflight import find_env

    find_env(cfg)
    checks = run_doctor(
        cfg.env.name, cfg.env.options, cfg.env.tasks, tasks, cfg.rollout.max_turns, cfg.seed
    )
    print_checks(checks, console, title=f"turnrl doctor {cfg.env.name}")
    return not any(c.ok is False for c in checks)


def parse_kinds(text: str) -> tuple[str, ...] | None:
    """``turnrl audit --kinds``: ValueError naming an unknown kind."""
    from turnrl.rewards.audit import parse_kinds as parse

    return parse(text)


def audit(
    env: str,
    options: dict[str, Any],
    split: str,
    n_tasks: int | None,
    max_mutants: int,
    out: Path,
    kinds: tuple[str, ...] | None,
    console: Any,
) -> None:
    """``turnrl audit``: the mutation-testing audit of a task set, written to ``out``."""
    from turnrl.rewards.audit import run_audit

    run_audit(
        env=env,
        options=options,
        split=split,
        n_tasks=n_tasks,
        max_mutants=max_mutants,
        out=out,
        kinds=kinds,
        console=console,
    )
