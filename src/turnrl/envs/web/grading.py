"""Answer grading: SQuAD-style normalised exact match and token F1, and an optional judge.

The judge is any object with ``async def chat(messages) -> str`` (an OpenAI-style message
list in, the reply text out). A judge that raises, times out or replies with something other
than one verdict is recorded as skipped; the episode then falls back to the string metric and
says so in its components and info (not its flags, which mark exploits), never a silent 0.
"""

from __future__ import annotations

import asyncio
import re
import string
from collections import Counter
from typing import Any, Protocol

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


class Judge(Protocol):
    async def chat(self, messages: list[dict[str, str]]) -> str: ...


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD)."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall after normalisation (SQuAD's F1)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    overlap = sum((Counter(pred) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


_VERDICT = re.compile(r"\b(CORRECT|INCORRECT)\b", re.IGNORECASE)


def judge_messages(question: str, gold: str, prediction: str) -> list[dict[str, str]]:
    return [
        {
            "role": "system",
            "content": "You check answers to questions against a reference answer.",
        },
        {
            "role": "user",
            "content": (
                f"Question: {question}\nReference answer: {gold}\nCandidate answer: {prediction}\n"
                "Does the candidate mean the same as the reference? "
                "Reply with one word: CORRECT or INCORRECT."
            ),
        },
    ]


def parse_verdict(reply: str) -> bool | None:
    """True/False for a reply holding exactly one kind of verdict word, else None."""
    found = {m.upper() for m in _VERDICT.findall(reply)}
    return (found == {"CORRECT"}) if len(found) == 1 else None


async def ask_judge(
    judge: Any, question: str, gold: str, prediction: str, timeout: float = 60.0
) -> tuple[bool | None, str]:
    """(verdict, note). verdict None means skipped; note says why (or holds the reply)."""
    try:
        reply = await asyncio.wait_for(
            judge.chat(judge_messages(question, gold, prediction)), timeout
        )
    except Exception as e:  # any judge failure is recorded, never raised into the rollout
        return None, f"judge failed: {type(e).__name__}: {e}"
    verdict = parse_verdict(str(reply))
    if verdict is None:
        return None, f"unparseable judge reply: {str(reply)[:200]!r}"
    return verdict, str(reply)[:200]
