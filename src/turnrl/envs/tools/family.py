"""``ToolsFamily``: the tool-API env family (tasks, fresh envs, experts, baselines)."""

from __future__ import annotations

from typing import Literal

import pydantic

from turnrl.envs.scripted import DoNothingAgent
from turnrl.envs.tools.env import ToolsEnv
from turnrl.envs.tools.expert import PlanAgent, solution_calls
from turnrl.envs.tools.tasks import generate
from turnrl.types import Task, ToolCall

Tier = Literal["easy", "hard"]


class ToolsOptions(pydantic.BaseModel):
    """Env options from config. Unknown keys and bad values raise (pydantic's ValidationError is
    a ValueError naming each bad field)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    tiers: tuple[Tier, ...] = ("easy", "hard")
    narrow_tools: bool = True  # show only the tools of the task's domains
    # "vocabulary": test tasks use words training never shows; "statement": the training
    # words, unseen goal statements (for a model whose tokenizer learned only training text)
    held_out: Literal["vocabulary", "statement"] = "vocabulary"
    train_size: int = pydantic.Field(600, gt=0)  # tasks() default n
    test_size: int = pydantic.Field(120, gt=0)


class ToolsFamily:
    name = "tools"

    def __init__(self, **options: object) -> None:
        self.options = ToolsOptions(**options)

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        """Generated tasks; ``test`` is held out by ``options.held_out``."""
        o = self.options
        if n is None:
            n = o.train_size if split == "train" else o.test_size
        return generate(split, n, seed, tuple(o.tiers), o.held_out)

    def make_env(self) -> ToolsEnv:
        return ToolsEnv(self.options.narrow_tools)

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> PlanAgent:
        return PlanAgent(
            solution_calls(task.payload), ToolCall("done", {}), noise, f"{task.id}:{seed}"
        )

    def baseline(self, task: Task) -> DoNothingAgent:
        return DoNothingAgent("done")

    def close(self) -> None:
        return None
