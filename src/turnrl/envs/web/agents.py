"""Scripted agents for the browsing env: the expert and a random-action baseline.

The expert reads observations like a person would: it searches the start entity, follows the
numbered link whose text is the next entity of the chain (turning pages when the link is not on
the current one), and on the last page finds the answer's line (``find("Population:")``) and
answers from it: the value then stands in one short, recent line, where a small model can copy
it, instead of among a page of ``Label: value`` lines it would first have to match. It knows
the route and the label (from the task), not the page contents, so its demonstrations only use
what the observations show. With ``noise`` it makes plausible mistakes (a wrong link, a vague
search, a needless find, a wrong value) and recovers by reopening the furthest page of the
route it has reached.

With ``lead=" "`` (the family's ``copy_spaces`` option, which the tiny recipe sets) it writes a
name or value it copies with the space it was read with (``" Shaiku Vessak"``, ``" 1633300"``;
search, find and grading ignore it): a byte-level BPE tokenizes a word after a space as another
token than after a quote, and a model trained from scratch copies tokens (an induction head),
not words, so without the space nothing it read is what it has to write. A pretrained model
needs no such help, so by default the expert writes values as a person would.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from turnrl.types import ToolCall

_VIEW = re.compile(r"^(/\S*) \(page (\d+)/(\d+)\)")
_LINK = re.compile(r"\[(\d+)\]")
_WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class _View:
    path: str
    page: int
    pages: int


def _parse_view(observation: str) -> _View | None:
    m = _VIEW.match(observation)
    return _View(m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def link_number(observation: str, title: str) -> int | None:
    """The number of the link whose text is exactly ``title``, if the observation shows it."""
    m = re.search(rf"\[(\d+)\] {re.escape(title)}(?=$|[\s.,;:])", observation, re.MULTILINE)
    return int(m.group(1)) if m else None


class WebExpert:
    def __init__(
        self,
        pages: list[tuple[str, str]],
        answer: str,
        label: str,
        seed: int = 0,
        noise: float = 0.0,
        lead: str = "",
    ) -> None:
        self.lead = lead  # written before each copied name or value
        self.titles = [t for t, _ in pages]
        self.paths = [p for _, p in pages]
        self.gold, self.find = answer, f"{label}:"
        self.rng, self.noise = random.Random(seed), noise
        self.reached = -1  # index of the furthest page of the route seen so far
        self.searched = False

    def act(self, observation: str) -> ToolCall:
        view = _parse_view(observation)
        if view and view.path in self.paths:
            self.reached = max(self.reached, self.paths.index(view.path))
        if self.noise and self.rng.random() < self.noise:
            return self._mistake(observation, view)
        return self._best(observation, view)

    def _best(self, observation: str, view: _View | None) -> ToolCall:
        if observation.startswith(f"'{self.find}' in {self.paths[-1]}:"):
            return ToolCall("answer", {"text": self.lead + self.gold})
        on_route = view is not None and view.path in self.paths
        if view is not None and view.path.startswith("/search"):
            n = link_number(observation, self.titles[0])
            if self.reached >= 0 or n is None:  # a stray search: go back to the route
                return self._open(max(0, self.reached))
            return ToolCall("follow", {"link_number": n})
        if not on_route:  # nothing open yet, a find result, an error or a wrong page
            if self.reached >= 0:
                return self._open(self.reached)
            if not self.searched:
                self.searched = True
                return ToolCall("search", {"query": self.lead + self.titles[0]})
            return self._open(0)
        assert view is not None
        i = self.paths.index(view.path)
        if i == len(self.paths) - 1:
            return ToolCall("find", {"text": self.find})
        n = link_number(observation, self.titles[i + 1])
        if n is not None:
            return ToolCall("follow", {"link_number": n})
        if view.page < view.pages:
            return ToolCall("open", {"url": view.path, "page": view.page + 1})
        return self._open(i + 1)

    def _open(self, i: int) -> ToolCall:
        return ToolCall("open", {"url": self.paths[i]})

    def _mistake(self, observation: str, view: _View | None) -> ToolCall:
        links = [int(n) for n in _LINK.findall(observation)]
        if view is not None and view.path == self.paths[-1] and self.rng.random() < 0.3:
            values = [line.split(": ", 1)[1] for line in observation.splitlines() if ": " in line]
            wrong = [v for v in values if v != self.gold and "[" not in v]
            if wrong:
                return ToolCall("answer", {"text": self.lead + self.rng.choice(wrong)})
        choice = self.rng.random()
        if links and choice < 0.5:
            return ToolCall("follow", {"link_number": self.rng.choice(links)})
        words = _WORD.findall(" ".join(self.titles))
        if choice < 0.8:
            return ToolCall("search", {"query": self.lead + self.rng.choice(words)})
        return ToolCall("find", {"text": self.lead + self.rng.choice(words)})


class WebRandomAgent:
    """Uniformly random tools with arguments drawn from what it has seen: the chance floor."""

    def __init__(self, question: str, seed: int = 0, answer_prob: float = 0.15) -> None:
        self.question, self.rng, self.answer_prob = question, random.Random(seed), answer_prob

    def act(self, observation: str) -> ToolCall:
        words = _WORD.findall(observation) or _WORD.findall(self.question)
        word = self.rng.choice(words)
        if self.rng.random() < self.answer_prob:
            return ToolCall("answer", {"text": word})
        tool = self.rng.choice(("search", "open", "follow", "find"))
        if tool == "search":
            return ToolCall(
                "search", {"query": " ".join(self.rng.sample(words, min(2, len(words))))}
            )
        if tool == "open":
            return ToolCall("open", {"url": f"/wiki/{word}"})
        if tool == "follow":
            return ToolCall("follow", {"link_number": self.rng.randint(1, 12)})
        return ToolCall("find", {"text": word})


class WebCompareExpert:
    """The expert of comparison questions (the family's ``compare`` option): for each page in
    turn it opens the page and finds the asked number's line (``find("Population:")``), then
    answers with the entity whose number was largest. It knows the pages and the answer (from
    the task), not the numbers; it moves on only when a find result for the current page shows
    the line, so a mistake (``noise``: a wrong page, a vague find) costs turns, not success."""

    def __init__(
        self,
        pages: list[tuple[str, str]],
        answer: str,
        label: str,
        seed: int = 0,
        noise: float = 0.0,
        lead: str = "",
    ) -> None:
        self.titles = [t for t, _ in pages]
        self.paths = [p for _, p in pages]
        self.gold, self.find, self.lead = answer, f"{label}:", lead
        self.rng, self.noise = random.Random(seed), noise
        self.next = 0  # the page whose number is still to be read

    def act(self, observation: str) -> ToolCall:
        if self.next < len(self.paths) and observation.startswith(
            f"'{self.find}' in {self.paths[self.next]}:"
        ):
            self.next += 1
        if self.next == len(self.paths):
            return ToolCall("answer", {"text": self.lead + self.gold})
        if self.noise and self.rng.random() < self.noise:
            if self.rng.random() < 0.5:
                return ToolCall("open", {"url": self.rng.choice(self.paths)})
            return ToolCall("find", {"text": self.lead + self.rng.choice(self.titles)})
        view = _parse_view(observation)
        if view is not None and view.path == self.paths[self.next]:
            return ToolCall("find", {"text": self.find})
        return ToolCall("open", {"url": self.paths[self.next]})
