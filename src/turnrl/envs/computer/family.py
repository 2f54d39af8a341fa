"""The ``computer`` env family: generated desktop tasks, each episode on its own desktop."""

from __future__ import annotations

import json
import zlib
from typing import Any, Literal

import pydantic

from turnrl.envs.computer.agents import ComputerExpert, ComputerRandomAgent
from turnrl.envs.computer.env import ComputerEnv
from turnrl.envs.computer.tasks import TIERS, generate
from turnrl.envs.scripted import DoNothingAgent
from turnrl.types import Task

DEFAULT_COUNT = {"train": 256, "test": 64}  # tasks(n=None): the pool is unbounded


class ComputerOptions(pydantic.BaseModel):
    """Options of the computer family; unknown keys and bad values are all reported at once."""

    model_config = pydantic.ConfigDict(extra="forbid")

    tier: Literal["easy", "medium", "hard", "all"] = "all"
    screenshots: bool = False  # PNG of the screen in every step's info["image"]
    test_fraction: float = pydantic.Field(0.2, gt=0, lt=1)  # instructions held out for test
    # the expert types a name with the space it was read with, so a model that copies tokens
    # (the tiny model) writes the tokens it read (see computer.agents)
    copy_spaces: bool = False


class ComputerFamily:
    name = "computer"

    def __init__(self, **options: Any) -> None:
        self.options = ComputerOptions(**options)  # pydantic.ValidationError is a ValueError
        tier = self.options.tier
        self.tiers = TIERS if tier == "all" else (tier,)

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        """``n`` tasks of ``split`` (``DEFAULT_COUNT`` when None); tiers alternate."""
        if split not in ("train", "test"):
            raise ValueError(f"computer: split must be 'train' or 'test', not {split!r}")
        count = DEFAULT_COUNT[split] if n is None else n
        payloads = generate(split, count, self.tiers, self.options.test_fraction, seed)
        return [
            Task(f"computer-{split}-{_crc(json.dumps(p, sort_keys=True)):08x}", self.name, p, split)
            for p in payloads
        ]

    def make_env(self) -> ComputerEnv:
        return ComputerEnv(screenshots=self.options.screenshots)

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> ComputerExpert:
        return ComputerExpert(
            task.payload["parts"],
            seed=_crc(f"{task.id}-{seed}"),
            noise=noise,
            lead=" " if self.options.copy_spaces else "",
        )

    def baseline(self, task: Task) -> DoNothingAgent:
        return DoNothingAgent("done")

    def random_agent(self, task: Task, seed: int = 0) -> ComputerRandomAgent:
        return ComputerRandomAgent(seed=_crc(f"{task.id}-{seed}"))

    def close(self) -> None:
        return None  # nothing shared: every env owns its desktop


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())
