"""Plain-text final answers: an env with ``final_answer = True`` ends the episode on a reply
without a tool call and grades that text; other envs treat such a reply as a format error.
Trained for a few steps through the real training loop on a user model directory (a
random-weight Llama with the Llama 3 template) with SFT off."""

from __future__ import annotations

import asyncio
import json
import random

from tests.chat_families import llama3, random_model
from turnrl.chat import check_template
from turnrl.envs.base import StepResult, ToolEnv
from turnrl.envs.guess import GuessEnv
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, default_sampling, run_episode
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.run.config import load_config
from turnrl.run.recipe import train
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall


def grade_text(text: str, total: int) -> float:
    return float(str(total) in text)


class SumEnv(ToolEnv):
    """What is a + b? The agent may call ``add``; its plain-text reply is the answer."""

    name = "sum"
    tools = ("add",)
    final_answer = True

    async def reset(self, task: Task) -> str:
        self.a, self.b = task.payload["a"], task.payload["b"]
        self.reply: str | None = None
        self.instructions = "Answer with the sum. You may call add first."
        return f"What is {self.a} + {self.b}?"

    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    async def answer(self, text: str) -> StepResult:
        self.reply = text
        return StepResult("answered", terminated=True)

    async def grade(self) -> RewardResult:
        reward = 0.0 if self.reply is None else grade_text(self.reply, self.a + self.b)
        return RewardResult(reward, reward == 1.0, components={"answered": float(bool(self.reply))})


class StrictSumEnv(SumEnv):
    """Asks again when the answer holds no number."""

    async def answer(self, text: str) -> StepResult:
        if not any(c.isdigit() for c in text):
            return StepResult("Answer with a number.")
        return await super().answer(text)


class SumFamily:
    name = "sum"

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        rng = random.Random(f"{split}{seed}")
        return [
            Task(f"{split}-{i}", "sum", {"a": rng.randint(0, 4), "b": rng.randint(0, 4)}, split)
            for i in range(n or 16)
        ]

    def make_env(self) -> SumEnv:
        return SumEnv()

    def expert(self, task, seed=0, noise=0.0):
        raise NotImplementedError("no scripted expert: SFT is off")

    baseline = expert

    def close(self) -> None:
        return None


class Replies:
    version = 0

    def __init__(self, renderer, texts):
        self.renderer, self.texts = renderer, texts

    def generate_batch(self, prompts, params, seeds=None):
        from turnrl.policy.base import Generation

        out = []
        for s in seeds:
            text = self.texts[min(s % 1000, len(self.texts) - 1)]
            ids = self.renderer.encode(text) + [self.renderer.turn_end_id]
            out.append(Generation(ids, [-0.5] * len(ids), True, self.version))
        return out


def episode(env, texts, task):
    renderer = check_template(llama3())

    async def go():
        batcher = GenerationBatcher(Replies(renderer, texts), default_sampling(renderer))
        return await run_episode(
            env, EpisodeRequest(task, "g", 0), renderer, batcher, RolloutLimits(max_turns=4)
        )

    return asyncio.run(go())


def test_a_plain_reply_is_the_final_answer_only_where_the_env_says_so():
    add = '{"name": "add", "parameters": {"a": 2, "b": 3}}'
    traj = episode(SumEnv(), [add, "The sum is 5."], Task("t", "sum", {"a": 2, "b": 3}))
    assert traj.termination is TerminationReason.DONE and traj.reward == 1.0
    assert [m["role"] for m in traj.messages[2:]] == ["assistant", "tool", "assistant"]
    assert traj.turns[0].tool_calls == [ToolCall("add", {"a": 2, "b": 3})]
    assert not traj.turns[1].malformed and traj.turns[1].obs_end == traj.turns[1].obs_start
    wrong = episode(SumEnv(), ["It is 6."], Task("t", "sum", {"a": 2, "b": 3}))
    assert wrong.termination is TerminationReason.DONE and wrong.reward == 0.0
    again = episode(StrictSumEnv(), ["No idea.", "5"], Task("t", "sum", {"a": 2, "b": 3}))
    assert again.termination is TerminationReason.DONE and again.reward == 1.0
    assert [m["content"] for m in again.messages if m["role"] == "tool"] == [
        "Answer with a number."
    ]
    assert not any(t.malformed for t in again.turns)

    guess = Task("g", "guess", {"secret": 5, "low": 1, "high": 8})
    traj = episode(GuessEnv(), ["I think it is 5."], guess)  # no final_answer: a format error
    assert traj.termination is TerminationReason.PARSE_ERRORS and traj.reward == 0.0
    assert all(t.malformed for t in traj.turns) and "no tool call" in traj.turns[0].parse_error


def test_final_answer_env_trains_through_the_loop(tmp_path, monkeypatch):
    tok = llama3()
    model_dir = tmp_path / "model"
    random_model(tok, "llama3").save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    monkeypatch.setattr(
        "turnrl.run.preflight.make_family", lambda name, options=None, tasks=None: SumFamily()
    )
    cfg = load_config(
        None,
        [
            "env.name=guess",  # replaced by SumFamily above
            f"model.name={model_dir}",
            "sft.enabled=false",
            "steps=3",
            "rollout.tasks_per_step=2",
            "rollout.group_size=4",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=12",
            "rollout.max_context_tokens=1024",
            "env.eval_tasks=2",
            "optim.lr=0.01",
            "threads=1",
            f"runs_dir={tmp_path / 'runs'}",
        ],
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    records = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    samples = [json.loads(ln) for ln in (run_dir / "samples.jsonl").read_text().splitlines()]
    answered = [s for s in samples if s["termination"] == "done"]
    assert answered, samples
    for s in answered:  # the reward is the grade of the reply's own text
        question = s["messages"][0]["content"]
        a, b = (int(x) for x in question.removeprefix("What is ").rstrip("?").split(" + "))
        assert s["messages"][-1]["role"] == "assistant"
        assert s["reward"] == grade_text(s["messages"][-1]["content"], a + b)
