"""A small verifiers environment written against the verifiers public API (no download):
sums of two numbers with an ``add`` tool, graded by a rubric of two reward functions and two
metrics (weight 0). Load it with ``verifiers.load_environment("vf_arith")`` from this folder, or train on
it: ``turnrl train env.name=verifiers env.options.env_id=vf_arith`` (run in ``examples/``).

``load_environment(mode="guess")`` instead gives a tool-free multi-turn game: guess the hidden
number from 1 to 8 in plain text, told "higher" or "lower" after each guess.
"""

from __future__ import annotations

import random

import verifiers as vf
from datasets import Dataset


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"question": f"What is {a} + {b}?", "answer": str(a + b)})
    return rows


def correct_answer(completion, answer) -> float:
    """1 when the final reply states the sum."""
    replies = [m for m in completion if m.role == "assistant" and m.content]
    return float(bool(replies) and answer in str(replies[-1].content))


def concise_answer(completion, answer) -> float:
    """1 when the final reply states the sum in at most 20 characters."""
    replies = [m for m in completion if m.role == "assistant" and m.content]
    return float(
        bool(replies) and answer in str(replies[-1].content) and len(str(replies[-1].content)) <= 20
    )


def used_the_tool(completion) -> float:
    """1 when the agent called add at least once."""
    return float(any(m.role == "tool" for m in completion))


def reply_length(completion) -> float:
    """Characters in the final reply (a metric: weight 0)."""
    replies = [m for m in completion if m.role == "assistant" and m.content]
    return float(len(str(replies[-1].content))) if replies else 0.0


class GuessEnv(vf.MultiTurnEnv):
    """Guess the hidden number (the row's answer) from 1 to 8 in plain text."""

    async def env_response(self, messages, state, **kwargs):
        guess = str(messages[-1].content).strip()
        target = int(state["answer"])
        if not guess.isdigit():
            return [vf.UserMessage(content="Reply with a number only.")]
        if int(guess) == target:
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]
            return state["final_env_response"]
        hint = "higher" if int(guess) < target else "lower"
        return [vf.UserMessage(content=f"{guess} is wrong; the number is {hint}.")]


def guessed(completion, answer) -> float:
    replies = [m for m in completion if m.role == "assistant"]
    return float(bool(replies) and str(replies[-1].content).strip() == answer)


def load_environment(mode: str = "tools", n: int = 200, max_turns: int = 4) -> vf.Environment:
    if mode == "guess":
        rng = random.Random(0)
        rows = [
            {"question": "Guess my number from 1 to 8.", "answer": str(rng.randint(1, 8))}
            for _ in range(n)
        ]
        rubric = vf.Rubric(funcs=[guessed], weights=[1.0])
        return GuessEnv(dataset=Dataset.from_list(rows), rubric=rubric, max_turns=max_turns)
    rubric = vf.Rubric(
        funcs=[correct_answer, concise_answer, used_the_tool, reply_length],
        weights=[1.0, 0.5, 0.0, 0.0],
    )
    return vf.ToolEnv(
        dataset=Dataset.from_list(_rows(n, 0)),
        eval_dataset=Dataset.from_list(_rows(max(n // 5, 1), 1)),
        system_prompt="Use the add tool, then reply with the sum.",
        tools=[add],
        rubric=rubric,
        max_turns=max_turns,
    )
