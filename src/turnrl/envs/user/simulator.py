"""User simulators: a customer with a hidden goal and persona, behind one interface.

The agent talks to the user with the ``send_message(text)`` tool; the simulator's reply is the
observation. Two implementations:

- :class:`ScriptedUser` — rule-based and deterministic given its seed (for tests, SFT
  demonstrations and tiny models). It answers only what it is asked, one detail per reply,
  confirms a change only when the agent names the right order, ends *satisfied* when its goal
  is met and it was told what it needed, and *frustrated* after ``patience`` unhelpful turns.
- :class:`ModelUser` — a frozen language model plays the user. It takes any object with
  ``async def chat(messages: list[dict]) -> str`` (OpenAI-style ``{"role", "content"}``
  messages; the simulated user is the ``assistant`` of that chat). Its text is an observation
  for the agent (loss_mask 0): it is never trained.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from turnrl.envs.user.db import contradicts, mentions


@dataclass(frozen=True)
class UserTurn:
    text: str
    done: bool = False
    outcome: str = ""  # "satisfied" | "frustrated" | "" (still talking)


class UserSimulator(Protocol):
    def opening(self) -> str:
        """The user's first message (the task statement the agent sees)."""
        ...

    async def reply(self, agent_message: str) -> UserTurn: ...


# Which details an agent message asks for, in the order the user considers them.
ASKS: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"e-?mail", re.I),
    "order_id": re.compile(r"order\s*(id|number|no\b|#)|which order|what order", re.I),
    "reason": re.compile(r"\breason\b|\bwhy\b", re.I),
    "address": re.compile(r"\baddress\b", re.I),
    "variant": re.compile(r"\bvariant\b|\bsize\b|\bcolou?r\b|which one|instead", re.I),
    "item": re.compile(r"\bitem\b|\bproduct\b", re.I),
}
_QUESTION = re.compile(
    r"\?|\b(please (provide|tell|share|give|confirm)|could you|can you|may i have|what is|"
    r"what's|let me know)\b",
    re.I,
)
_CONFIRM = re.compile(r"\bconfirm\b|\bproceed\b|shall i|should i|go ahead|yes/no|\bok\b\?", re.I)

_PHRASES = {
    "terse": ("{v}.", "{v}"),
    "friendly": ("Sure! It's {v}.", "Of course, it's {v}."),
    "impatient": ("{v}. Please be quick.", "It's {v}. Can we hurry?"),
}


class ScriptedUser:
    """Deterministic rule-based customer.

    ``goal`` is the task's ``user`` payload (opening, facts, order_hint, required_info,
    info_question, wants_change, target); ``persona`` has ``style`` and ``patience``.
    ``goal_reached`` tells whether the store's database is in the goal state (the env passes
    its state check); it stands in for what a real user would learn from the agent.
    """

    def __init__(
        self,
        goal: dict[str, Any],
        persona: dict[str, Any],
        seed: int = 0,
        goal_reached: Callable[[], bool] = lambda: False,
        details_per_turn: int = 1,
    ) -> None:
        self.goal, self.persona = goal, persona
        self.rng = random.Random(seed)
        self.goal_reached = goal_reached
        self.details_per_turn = details_per_turn
        self.patience = int(persona.get("patience", 3))
        self.revealed: list[str] = []
        self.told: set[str] = set()
        self.unhelpful = 0
        self.finished = False

    def opening(self) -> str:
        return self.goal["opening"]

    async def reply(self, agent_message: str) -> UserTurn:
        if self.finished:
            return UserTurn("(the user has left the conversation)", done=True)
        required = self.goal["required_info"]
        self.told |= {
            s for s in required if mentions(agent_message, s) and not contradicts(agent_message, s)
        }
        if self.goal_reached() and self.told >= set(required):
            return self._end("Great, that's all I needed. Thanks, bye!", "satisfied")
        asked = bool(_QUESTION.search(agent_message))
        if asked and _CONFIRM.search(agent_message):
            right = self.goal["wants_change"] and mentions(agent_message, self.goal["target"])
            if right and not self.goal_reached():
                return UserTurn(self._pick(("Yes, please go ahead.", "Yes, do it.")))
            return self._unhelpful("No, that's not what I asked for.")
        if asked:
            answers, new = self._answers(agent_message)
            if answers:  # asking again for a detail already given counts as unhelpful
                text = " ".join(answers)
                return UserTurn(text) if new else self._unhelpful(text)
        if self.goal_reached():  # change done but the user still lacks what they wanted to know
            return self._unhelpful(self.goal["info_question"])
        return self._unhelpful(
            f"I'm not sure that helps. {self.goal['opening'].split(', ', 1)[-1]}"
        )

    def _answers(self, message: str) -> tuple[list[str], bool]:
        out: list[str] = []
        new = False
        facts = self.goal["facts"]
        for key, pattern in ASKS.items():
            if len(out) >= self.details_per_turn or not pattern.search(message):
                continue
            if key == "order_id" and self.goal.get("order_hint"):
                out.append(self.goal["order_hint"])
            elif key in facts:
                out.append(self._phrase(facts[key]))
            else:
                continue
            if key not in self.revealed:
                self.revealed.append(key)
                new = True
        return out, new

    def _phrase(self, value: str) -> str:
        return self._pick(
            _PHRASES.get(self.persona.get("style", "terse"), _PHRASES["terse"])
        ).format(v=value)

    def _pick(self, options: tuple[str, ...]) -> str:
        return options[self.rng.randrange(len(options))]

    def _unhelpful(self, text: str) -> UserTurn:
        self.unhelpful += 1
        if self.unhelpful >= self.patience:
            return self._end("This isn't helping. Goodbye.", "frustrated")
        return UserTurn(text)

    def _end(self, text: str, outcome: str) -> UserTurn:
        self.finished = True
        return UserTurn(text, done=True, outcome=outcome)


class ChatBackend(Protocol):
    async def chat(self, messages: list[dict[str, str]]) -> str: ...


STOP = "###STOP###"


class ModelUser:
    """A frozen model plays the customer. Ends when it writes ``###STOP###`` or after
    ``max_turns`` replies (then it leaves frustrated)."""

    def __init__(
        self,
        backend: ChatBackend,
        goal: dict[str, Any],
        persona: dict[str, Any],
        max_turns: int = 12,
    ) -> None:
        self.backend = backend
        self.goal = goal
        self.max_turns = max_turns
        self.turns = 0
        facts = "\n".join(f"- {k}: {v}" for k, v in goal["facts"].items())
        if goal.get("order_hint"):
            facts += f"\n- you do not remember the order id; if asked say: {goal['order_hint']}"
        need = ", ".join(goal["required_info"]) or "nothing extra"
        self.messages: list[dict[str, str]] = [
            {
                "role": "system",
                "content": (
                    f"You are {persona.get('name', 'a customer')}, a {persona.get('style', 'terse')} "
                    f"customer talking to a store's support agent. Your request: "
                    f"{goal['opening']}\nFacts you know (give one only when asked for it):\n{facts}\n"
                    f"Say yes only to a change that matches your request. You need to be told: "
                    f"{need}. When your request is handled, thank the agent and write {STOP}. "
                    f"If the agent is unhelpful several times, say goodbye and write {STOP}. "
                    f"Reply in one or two short sentences."
                ),
            },
            {"role": "assistant", "content": goal["opening"]},
        ]

    def opening(self) -> str:
        return self.goal["opening"]

    async def reply(self, agent_message: str) -> UserTurn:
        self.messages.append({"role": "user", "content": agent_message})
        text = await self.backend.chat(list(self.messages))
        self.messages.append({"role": "assistant", "content": text})
        self.turns += 1
        if STOP in text:
            return UserTurn(text.replace(STOP, "").strip() or "Bye.", done=True, outcome="ended")
        if self.turns >= self.max_turns:
            return UserTurn(text, done=True, outcome="frustrated")
        return UserTurn(text)
