"""The scripted expert for the code env: the demonstrations the SFT warm start learns from.

Plan: read the buggy file, run the tests (except in tier 0, where the docstring states what the
code must do), make the minimal edit(s) that turn the buggy file into the gold one, run the tests
again, submit. Each ``edit_file`` uses the smallest unique ``old``
string: within a changed line, only the changed words (``" +"`` -> ``" -"``), widened word by word
while that text is not unique; for a multi-line change, the changed lines without their
indentation, widened by neighbouring lines. Short edits are what a careful model emits, and
they are what a tiny model can learn to write: naming the wrong operator, not retyping the line.

With ``noise > 0`` each decision goes wrong with that probability, in the ways models do: an
edit that changes the wrong operator or constant (then, after seeing the tests fail, a repair),
skipping the edit, or submitting without running the tests.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass

from turnrl.types import Task, ToolCall

_OPERATOR_SWAPS = [
    ("<=", "<"),
    (">=", ">"),
    ("==", "!="),
    ("!=", "=="),
    (" < ", " <= "),
    (" > ", " >= "),
    (" + ", " - "),
    (" - ", " + "),
    (" * ", " + "),
    (" and ", " or "),
    (" or ", " and "),
]


_CONTEXT = 8  # lines shown around an edit when the whole file does not fit


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


def minimal_edits(path: str, buggy: str, fixed: str) -> list[Edit]:
    """Edits (in file order, each unique when applied in turn) that turn ``buggy`` into ``fixed``."""
    a = buggy.splitlines(keepends=True)
    b = fixed.splitlines(keepends=True)
    opcodes = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    edits: list[Edit] = []
    current = buggy
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        lo, hi, blo, bhi = i1, i2, j1, j2
        while True:
            old, new = _trim("".join(a[lo:hi]), "".join(b[blo:bhi]))
            if old and current.count(old) == 1:
                break
            if lo > 0:  # widen with the line before (equal in both files)
                lo, blo = lo - 1, blo - 1
            elif hi < len(a):
                hi, bhi = hi + 1, bhi + 1
            else:  # the whole file: fall back to rewriting it verbatim
                old, new = current, current.replace("".join(a), "".join(b))
                break
        edits.append(Edit(path, old, new))
        current = current.replace(old, new, 1)
    return edits


def _trim(old: str, new: str) -> tuple[str, str]:
    """Drop the shared leading indentation and trailing newline, which the edit keeps anyway."""
    if old.endswith("\n") and new.endswith("\n"):
        old, new = old[:-1], new[:-1]
    indent = old[: len(old) - len(old.lstrip(" \t"))]
    if indent and new.startswith(indent):
        old, new = old[len(indent) :], new[len(indent) :]
    return old, new


_WORD_RE = re.compile(r"\w+|\s+|[^\w\s]+")


def narrow(old: str, new: str, text: str) -> tuple[str, str]:
    """The smallest ``(old, new)`` pair, in whole words, that makes the same one-line change to
    ``text`` (where ``old`` occurs once): the changed words, widened by a word at a time (left
    first) until ``old`` is unique in ``text`` and neither end is whitespace, then with the one
    space before them, so the edit is tokenized like the code it copies. A multi-line change is
    returned as it is."""
    if "\n" in old or "\n" in new:
        return old, new
    a, b = _WORD_RE.findall(old), _WORD_RE.findall(new)
    lo = 0
    while lo < min(len(a), len(b)) and a[lo] == b[lo]:
        lo += 1
    end = 0  # common words at the end, not overlapping the common start
    while end < min(len(a), len(b)) - lo and a[-1 - end] == b[-1 - end]:
        end += 1
    hi_a, hi_b = len(a) - end, len(b) - end
    while True:
        o, n = "".join(a[lo:hi_a]), "".join(b[lo:hi_b])
        if o and o == o.strip() and text.count(o) == 1:
            if lo > 0 and a[lo - 1] == " ":  # " +" is one token, as in the code; "+" is not
                o, n = " " + o, " " + n
            return o, n
        if lo > 0:
            lo -= 1
        elif hi_a < len(a):
            hi_a, hi_b = hi_a + 1, hi_b + 1
        else:
            return old, new


def wrong_variant(text: str, rng: random.Random) -> str | None:
    """A plausible but wrong version of a fixed line: one operator swapped or a constant off by
    one. None when nothing applies."""
    options: list[str] = []
    for a, b in _OPERATOR_SWAPS:
        if a in text:
            options.append(text.replace(a, b, 1))
    for m in re.finditer(r"(?<![\w.])\d+(?![\w.])", text):
        value = int(m.group()) + rng.choice([-1, 1])
        if value >= 0:
            options.append(text[: m.start()] + str(value) + text[m.end() :])
    options = [o for o in options if o != text]
    return rng.choice(options) if options else None


def gold_edits(payload: Mapping) -> list[Edit]:
    """All minimal edits from the buggy repo to the gold patch."""
    edits: list[Edit] = []
    for path in sorted(payload["gold_patch"]):
        buggy, fixed = payload["repo"].get(path), payload["gold_patch"][path]
        if buggy is None:  # a new file: written whole (old == "" means write_file)
            edits.append(Edit(path, "", fixed))
        elif buggy != fixed:
            edits += minimal_edits(path, buggy, fixed)
    return edits


class CodeExpert:
    """``act(observation) -> ToolCall``; solves the task when ``noise == 0``."""

    def __init__(
        self, task: Task, seed: int = 0, noise: float = 0.0, max_obs_chars: int = 2000
    ) -> None:
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        self.max_obs_chars = max_obs_chars
        self.rng = random.Random(f"{task.id}-{seed}")
        self.noise = noise
        self.payload = task.payload
        self.edits = gold_edits(task.payload)
        self.plan = self._plan()

    def _mistake(self) -> bool:
        return self.noise > 0 and self.rng.random() < self.noise

    def _plan(self) -> list[ToolCall]:
        """The whole episode, decided up front (scripted agents ignore observations)."""
        calls: list[ToolCall] = []
        files = {e.path: self.payload["repo"].get(e.path, "") for e in self.edits}
        for path, text in files.items():
            if path in self.payload["repo"]:
                calls += self._reads(path, text)
        if self.payload.get("tier") != 0:  # tier 0's docstring states the intent: no need
            calls.append(ToolCall("run_tests", {}))
        if self._mistake():  # gives up before editing
            return [*calls, ToolCall("submit", {})]
        for edit in self.edits:
            if not edit.old:
                calls.append(ToolCall("write_file", {"path": edit.path, "content": edit.new}))
                continue
            text = files[edit.path]
            wrong = wrong_variant(edit.new, self.rng) if self._mistake() else None
            slipped = text.replace(edit.old, wrong, 1) if wrong is not None else ""
            files[edit.path] = text.replace(edit.old, edit.new, 1)
            # A slip back to the bug itself is no slip; a repair must be unique too.
            if wrong is None or wrong == edit.old or slipped.count(wrong) != 1:
                calls.append(_edit_call(edit.path, *narrow(edit.old, edit.new, text)))
                continue
            calls.append(_edit_call(edit.path, *narrow(edit.old, wrong, text)))
            calls.append(ToolCall("run_tests", {}))
            if not self._mistake():  # the failing tests show the slip: repair it
                calls.append(_edit_call(edit.path, *narrow(wrong, edit.new, slipped)))
        if not self._mistake():  # forgetting to check before submitting
            calls.append(ToolCall("run_tests", {}))
        calls.append(ToolCall("submit", {}))
        return calls

    def _reads(self, path: str, text: str) -> list[ToolCall]:
        """Read the whole file when it fits in one observation, else windows around the edits."""
        lines = text.splitlines()
        if sum(len(line) + 6 for line in lines) <= self.max_obs_chars:
            return [ToolCall("read_file", {"path": path})]
        windows: list[list[int]] = []
        for edit in self.edits:
            if edit.path != path or not edit.old or edit.old not in text:
                continue
            first = text[: text.index(edit.old)].count("\n") + 1
            lo, hi = max(1, first - _CONTEXT), first + edit.old.count("\n") + _CONTEXT
            if windows and lo <= windows[-1][1] + 1:
                windows[-1][1] = max(windows[-1][1], hi)
            else:
                windows.append([lo, hi])
        return [
            ToolCall("read_file", {"path": path, "start_line": lo, "end_line": min(hi, len(lines))})
            for lo, hi in windows
        ]

    def act(self, observation: str) -> ToolCall:
        return self.plan.pop(0) if self.plan else ToolCall("submit", {})


def _edit_call(path: str, old: str, new: str) -> ToolCall:
    return ToolCall("edit_file", {"path": path, "old": old, "new": new})
