"""A complete env of your own: answer an arithmetic question using calculator tools.

    turnrl doctor examples.calculator:CalculatorEnv
    turnrl train env.name=examples.calculator:CalculatorEnv sft.enabled=false
    turnrl train env.name=examples.calculator:CalculatorEnv \
        env.tasks=examples/calculator_tasks.jsonl sft.enabled=false

The class is the whole contract: ``tools`` names the methods the model may call (their type
hints and docstrings become the schemas it reads), ``reset`` starts an episode from a task's
payload, ``grade`` scores it. ``tasks`` is optional when ``env.tasks`` gives a file.
"""

from __future__ import annotations

import random

from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.types import RewardResult, Task


class CalculatorEnv(ToolEnv):
    name = "calculator"
    tools = ("add", "multiply", "answer")

    async def reset(self, task: Task) -> str:
        self.expected, self.given = int(task.payload["answer"]), None
        self.instructions = "Compute the result with the tools, then call answer with it."
        return f"What is {task.payload['question']}?"

    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    def multiply(self, a: int, b: int) -> str:
        """Multiply two integers."""
        return str(a * b)

    def answer(self, value: int) -> ToolOutput:
        """Submit the final result; this ends the episode."""
        self.given = value
        return ToolOutput(f"submitted {value}", done=True)

    async def grade(self) -> RewardResult:
        solved = self.given == self.expected
        return RewardResult(reward=float(solved), success=solved)

    @classmethod
    def tasks(cls, split: str, n: int | None = None, seed: int = 0) -> list[dict]:
        """Generated payloads ``a * b + c``; train and test draw from separate streams."""
        rng = random.Random(f"{split}-{seed}")
        rows = []
        for _ in range(n or 200):
            a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(1, 30)
            rows.append({"question": f"{a} * {b} + {c}", "answer": a * b + c})
        return rows
