"""reasoning-gym datasets as a turnrl env family: ``env.name=reasoning_gym
env.options.dataset=chain_sum``.

reasoning-gym generates questions procedurally (no download) and scores an answer with the
dataset's own ``score_answer(answer, entry)`` in [0, 1]. The mapping:

- the question is the task statement; the system prompt asks for the answer alone;
- the action: a ``submit(answer)`` tool, or a plain-text reply (the env takes final answers):
  the text between ``<answer>`` and ``</answer>`` when present (reasoning-gym's own
  convention), else the whole reply;
- the ending: the episode terminates on a correct answer or when ``attempts`` answers are
  used; a wrong answer with attempts left is answered with its score and the episode goes on;
- the reward is the dataset's score of the last answer, success a score of 1;
- tasks: rows of the dataset generated from the run's seed, each train or held-out by a
  stable hash of its question (so no question is in both splits). A row is regenerated from
  (dataset, config, seed, size, index) in the env: what the scorer reads (its metadata) never
  passes through JSON.
"""

from __future__ import annotations

import json
from typing import Any

from turnrl.envs.adapters import require
from turnrl.envs.base import StepResult, ToolEnv, ToolOutput, hash_split
from turnrl.envs.scripted import IdleAgent
from turnrl.types import RewardResult, Task, ToolCall

INSTRUCTIONS = (
    "Solve the problem. Give only the final answer, in the format the question asks for: call "
    "submit with it, or reply with it between <answer> and </answer>."
)


class Datasets:
    """Built reasoning-gym datasets, one per (config, seed, size), shared by a family's envs."""

    def __init__(self, dataset: str, config: dict[str, Any]) -> None:
        self.rg = require("reasoning_gym", "reasoning_gym")
        from reasoning_gym.factory import DATASETS

        if dataset not in DATASETS:
            close = [d for d in DATASETS if dataset[:4] in d][:5]
            hint = f"; similar: {', '.join(close)}" if close else ""
            raise ValueError(
                f"env.options.dataset: {dataset!r} is not a reasoning-gym dataset{hint}"
            )
        bad = {"seed", "size"} & set(config)
        if bad:
            raise ValueError(
                f"env.options.config: {sorted(bad)} are set by turnrl (tasks are drawn from the "
                "run's seed)"
            )
        self.dataset, self.config = dataset, dict(config)
        self.built: dict[tuple[int, int], Any] = {}
        self.get(0, 1)  # a bad config fails now, naming it

    def get(self, seed: int, size: int) -> Any:
        key = (seed, size)
        if key not in self.built:
            try:
                self.built[key] = self.rg.create_dataset(
                    self.dataset, seed=seed, size=size, **self.config
                )
            except (TypeError, AssertionError, ValueError) as e:
                raise ValueError(f"env.options.config: {self.dataset}: {e}") from None
        return self.built[key]

    def entry(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.get(payload["seed"], payload["size"])[payload["index"]]

    def score(self, answer: str, payload: dict[str, Any]) -> float:
        data = self.get(payload["seed"], payload["size"])
        return float(data.score_answer(answer, self.entry(payload)))


class ReasoningGymEnv(ToolEnv):
    name = "reasoning_gym"
    tools = ("submit",)
    final_answer = True

    def __init__(self, datasets: Datasets, attempts: int) -> None:
        self.datasets, self.attempts = datasets, attempts
        self.payload: dict[str, Any] = {}
        self.scores: list[float] = []

    async def reset(self, task: Task) -> str:
        if task.payload.get("dataset") != self.datasets.dataset:
            raise ValueError(
                f"task {task.id} is from dataset {task.payload.get('dataset')!r}, "
                f"not env.options.dataset={self.datasets.dataset!r}"
            )
        self.payload, self.scores = dict(task.payload), []
        self.instructions = INSTRUCTIONS
        return str(self.datasets.entry(self.payload)["question"])

    def submit(self, answer: str) -> ToolOutput:
        """Submit your final answer: only the answer, in the format the question asks for."""
        text, done = self._judge(answer)
        return ToolOutput(text, done=done)

    async def answer(self, text: str) -> StepResult:
        from reasoning_gym.utils import extract_answer

        tagged = extract_answer(text)
        observation, done = self._judge(tagged if tagged is not None else text.strip())
        return StepResult(observation, terminated=done, info={"anchor": observation})

    def _judge(self, answer: str) -> tuple[str, bool]:
        score = self.datasets.score(answer, self.payload)
        self.scores.append(score)
        if score >= 1.0:
            return "Correct.", True
        left = self.attempts - len(self.scores)
        if left <= 0:
            return f"Incorrect (score {score:.2f}).", True
        return f"Incorrect (score {score:.2f}). Try again: {left} attempt(s) left.", False

    async def grade(self) -> RewardResult:
        score = self.scores[-1] if self.scores else 0.0
        return RewardResult(
            reward=score,
            success=score >= 1.0,
            components={"score": score, "answers": float(len(self.scores))},
        )


class OracleAgent:
    """The expert: submits the dataset's own answer; with ``noise`` a wrong one first, with
    that probability (or only a wrong one, when one attempt is allowed)."""

    def __init__(self, answer: str, noise: float, seed: int) -> None:
        import random

        self.answer, self.wrong = answer, random.Random(seed).random() < noise

    def act(self, observation: str) -> ToolCall:
        if self.wrong:
            self.wrong = False
            return ToolCall("submit", {"answer": "I do not know."})
        return ToolCall("submit", {"answer": self.answer})


class ReasoningGymFamily:
    """Tasks are rows of ``dataset`` (``config`` sets its generator's parameters, its defaults
    fill the rest); ``attempts`` answers are allowed per episode."""

    name = "reasoning_gym"

    def __init__(
        self, dataset: str, config: dict[str, Any] | None = None, attempts: int = 1
    ) -> None:
        if attempts < 1:
            raise ValueError(f"env.options.attempts: must be >= 1, got {attempts}")
        self.datasets = Datasets(dataset, dict(config or {}))
        self.dataset, self.attempts = dataset, attempts

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        n = n or 64
        size = 8 * n + 64  # rows drawn to find n of this split (about 1 in 5 is held out)
        data = self.datasets.get(seed, size)
        config = json.loads(json.dumps(self.datasets.config))
        out: list[Task] = []
        for index in range(size):
            question = str(data[index]["question"])
            if hash_split(question) != split:
                continue
            payload = {
                "dataset": self.dataset,
                "config": config,
                "seed": seed,
                "size": size,
                "index": index,
            }
            out.append(Task(f"rg-{self.dataset}-{seed}-{size}-{index}", self.name, payload, split))
            if len(out) == n:
                break
        return out

    def make_env(self) -> ReasoningGymEnv:
        return ReasoningGymEnv(self.datasets, self.attempts)

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> OracleAgent:
        entry = self.datasets.entry(task.payload)
        return OracleAgent(str(entry["answer"]), noise, seed)

    def baseline(self, task: Task) -> IdleAgent:
        return IdleAgent()

    def close(self) -> None:
        return None
