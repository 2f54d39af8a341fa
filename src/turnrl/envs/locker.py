"""Open a locker whose code only a helper can read: the smallest task where delegating helps.

The agent opens a locker with ``open_locker(code)``; one try, right or wrong, ends the episode.
The code (1 to 16) is written in a ledger the agent has no tool to read. Its helper can: with
``subagent.enabled`` the agent has ``delegate(task)``, which runs a subagent in the ledger
(:meth:`LockerEnv.subagent_env`: ``read_ledger()`` and ``answer(code)``), and the subagent's
answer comes back as the observation. An agent that never delegates can only guess (1 in
16). Held out by (owner, code) pair.
"""

from __future__ import annotations

import random
import re

from turnrl.envs.base import ToolEnv, ToolOutput, hash_split
from turnrl.envs.scripted import DoNothingAgent
from turnrl.types import RewardResult, Task, ToolCall

OWNERS = ("Ann", "Bob", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jo", "Kai", "Lea")
CODES = range(1, 17)
DELEGATED = "read the locker code"  # what the expert asks its helper


class LockerEnv(ToolEnv):
    name = "locker"
    tools = ("open_locker",)

    def __init__(self) -> None:
        self.owner, self.code, self.opened, self.tried = "", 0, False, None

    async def reset(self, task: Task) -> str:
        self.owner, self.code = str(task.payload["owner"]), int(task.payload["code"])
        self.opened, self.tried = False, None
        self.instructions = (
            "Open the locker with open_locker. Its code is in the ledger, which only your "
            "helper can read."
        )
        return f"Open the locker of {self.owner}."

    def open_locker(self, code: int) -> ToolOutput:
        """Try a code on the locker (one try)."""
        self.tried, self.opened = code, code == self.code
        return ToolOutput("opened" if self.opened else "wrong code", done=True)

    def subagent_env(self) -> LedgerEnv:
        return LedgerEnv(self.owner, self.code)

    async def grade(self) -> RewardResult:
        return RewardResult(
            reward=float(self.opened),
            success=self.opened,
            components={"opened": float(self.opened)},
        )


class LedgerEnv(ToolEnv):
    """The helper's side: the ledger line of the locker, and ``answer`` to report a code."""

    name = "locker-ledger"
    tools = ("read_ledger", "answer")

    def __init__(self, owner: str, code: int) -> None:
        self.owner, self.code, self.answered = owner, code, None

    async def reset(self, task: Task) -> str:
        self.instructions = "You are a helper who can read the ledger. Report with answer."
        return str(task.payload["task"])

    def read_ledger(self) -> str:
        """Read the ledger of lockers."""
        return f"Locker of {self.owner}: code={self.code}"

    def answer(self, code: int) -> ToolOutput:  # type: ignore[override]
        """Report the code you found; this ends your work."""
        self.answered = code
        return ToolOutput(str(code), done=True)

    async def grade(self) -> RewardResult:
        ok = self.answered == self.code
        return RewardResult(float(ok), ok)


class LockerExpert:
    """Delegates, then opens with the code its helper reported. With probability ``noise`` it
    guesses a code at once instead; it also guesses when no helper answered."""

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        self.rng, self.noise, self.asked = random.Random(seed), noise, False

    def act(self, observation: str) -> ToolCall:
        if not self.asked and self.rng.random() >= self.noise:
            self.asked = True
            return ToolCall("delegate", {"task": DELEGATED})
        answered = observation.strip()  # the delegate tool returns the helper's answer
        code = int(answered) if answered.isdigit() else self.rng.choice(CODES)
        return ToolCall("open_locker", {"code": code})


class LedgerReader:
    """The helper's expert: reads the ledger, then answers the code written there."""

    def act(self, observation: str) -> ToolCall:
        found = re.search(r"code=(\d+)", observation)
        if found is None:
            return ToolCall("read_ledger", {})
        return ToolCall("answer", {"code": int(found[1])})


class LockerFamily:
    name = "locker"

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        pool = [
            {"owner": o, "code": c}
            for o in OWNERS
            for c in CODES
            if hash_split(f"{o}-{c}") == split
        ]
        rng = random.Random(f"{split}-{seed}")
        n = n or len(pool)
        return [
            Task(f"locker-{split}-{seed}-{i}", "locker", rng.choice(pool), split) for i in range(n)
        ]

    def make_env(self) -> LockerEnv:
        return LockerEnv()

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> LockerExpert:
        return LockerExpert(noise, seed)

    def subagent_expert(self, task: Task) -> LedgerReader:
        return LedgerReader()

    def baseline(self, task: Task) -> DoNothingAgent:
        return DoNothingAgent("open_locker", {"code": 0})  # no locker has code 0

    def close(self) -> None:
        return None
