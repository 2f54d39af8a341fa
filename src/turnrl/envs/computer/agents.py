"""Scripted agents for the desktop: the expert and a random-action baseline.

The expert turns the task's parts into intents ("open settings", "jump to Dark mode and press
Space", "type X into the field named File name") and resolves each against the tree it reads,
so every id it uses comes from an observation: when the target is scrolled out of view it
scrolls, when a field holds old text it selects it first. It picks settings, dropdown values
and files by type-ahead rather than by id, so what it writes is a copy of the instruction.
A dropdown it focuses by click, not by a type-ahead jump: after ``type(" Language")`` a small
model's induction head answers the next ``type`` with " Language" again (measured: 0 of 147
held-out choices), whatever the instruction asks. With ``noise`` it sometimes makes
a plausible slip instead (a click on a random element, the wrong app, a stray scroll or key);
some slips are harmless detours, some ruin the task, as with a careless person.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from turnrl.envs.computer.apps import SETTING
from turnrl.envs.computer.desktop import KEYS
from turnrl.types import ToolCall

_LINE = re.compile(r'^(\s*)\[(\d+)\] (\w+) ("(?:[^"\\]|\\.)*")(.*)$')
_TITLES = {"editor": "Text Editor", "files": "Files", "settings": "Settings"}


@dataclass(frozen=True)
class Seen:
    id: int
    role: str
    name: str
    window: str
    rest: str  # value and states, as shown

    @property
    def states(self) -> list[str]:
        return self.rest.rsplit('"', 1)[-1].split()

    @property
    def value(self) -> str:
        m = re.match(r'\s*("(?:[^"\\]|\\.)*")', self.rest)
        return json.loads(m.group(1)) if m else ""


def parse_tree(observation: str) -> list[Seen] | None:
    """The elements an observation shows, or None if it shows no tree (an error message)."""
    out: list[Seen] = []
    window = ""
    for line in observation.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        _, id_, role, name, rest = m.groups()
        name = json.loads(name)
        if role == "window":
            window = name
        out.append(Seen(int(id_), role, name, window, rest))
    if not out and "No open windows." not in observation:
        return None
    return out


def plan(parts: list[dict]) -> list[tuple]:
    """Intents for the parts, in order, then done."""
    steps: list[tuple] = []
    for p in parts:
        kind = p["kind"]
        if kind in ("toggle", "choose", "text_setting"):
            label = SETTING[p["key"]].label
            steps.append(("open", "settings"))
            if kind == "toggle":
                steps += [("jump", label), ("toggle", label)]
            elif kind == "choose":  # by click: a second type-ahead copies the first again
                steps.append(("pick", "Settings", "dropdown", label, p["value"]))
            else:
                steps.append(("type_into", "Settings", "textbox", label, p["value"]))
        elif kind in ("delete", "rename"):
            steps += [("open", "files"), ("pick", "Files", "list", "Files", p["name"])]
            if kind == "delete":
                steps.append(("key", "Delete"))
            else:
                steps += [
                    ("type_into", "Files", "textbox", "New name", p["new_name"]),
                    ("click", "Files", "button", "Rename"),
                ]
        else:
            steps += [
                ("open", "editor"),
                ("type_into", "Text Editor", "textbox", "File name", p["name"]),
            ]
            if kind != "create":
                steps.append(("click", "Text Editor", "button", "Open"))
            if kind == "append":
                steps += [
                    ("click", "Text Editor", "textarea", "Content"),
                    ("key", "Enter"),
                    ("type", p["text"]),
                ]
            else:
                steps.append(("type_into", "Text Editor", "textarea", "Content", p["text"]))
            steps.append(("click", "Text Editor", "button", "Save"))
    return steps + [("done",)]


class ComputerExpert:
    def __init__(
        self, parts: list[dict], seed: int = 0, noise: float = 0.0, lead: str = ""
    ) -> None:
        self.lead = lead  # written before each name typed ahead (see _type_ahead)
        self.intents = plan(parts)
        self.i = 0
        self.rng, self.noise = random.Random(seed), noise
        self.seen: list[Seen] = []

    def act(self, observation: str) -> ToolCall:
        tree = parse_tree(observation)
        if tree is not None:
            self.seen = tree
        if self.noise and self.rng.random() < self.noise:
            return self._slip()
        while True:
            call, advance = self._resolve(self.intents[min(self.i, len(self.intents) - 1)])
            if advance:
                self.i += 1
            if call is not None:
                return call

    def _find(self, window: str, role: str, name: str) -> Seen | None:
        return next(
            (e for e in self.seen if (e.window, e.role, e.name) == (window, role, name)), None
        )

    def _resolve(self, intent: tuple) -> tuple[ToolCall | None, bool]:
        what = intent[0]
        if what == "done":
            return ToolCall("done", {}), True
        if what == "open":
            if any(e.role == "window" and e.name == _TITLES[intent[1]] for e in self.seen):
                return None, True
            return ToolCall("open_app", {"name": intent[1]}), True
        if what == "key":
            return ToolCall("key", {"name": intent[1]}), True
        if what == "type":
            return ToolCall("type", {"text": intent[1]}), True
        if what == "jump":
            call = self._jump(intent[1])
            return call, call.name == "type"
        if what == "toggle":  # on the checkbox the jump focused, else jump again
            box = self._find("Settings", "checkbox", intent[1])
            if box is None or "focused" not in box.states:
                return self._jump(intent[1]), False
            return ToolCall("key", {"name": "Space"}), True
        window, role, name = intent[1:4]
        target = self._find(window, role, name)
        if target is None:
            if not any(e.role == "window" and e.name == window for e in self.seen):
                app = next(a for a, t in _TITLES.items() if t == window)
                return ToolCall("open_app", {"name": app}), False  # closed by a slip: reopen
            dropdown = self._find(window, "dropdown", intent[4]) if role == "option" else None
            if dropdown is not None:
                return ToolCall("click", {"id": dropdown.id}), False  # collapsed: expand again
            return self._scroll_towards(window), False
        if what == "click":
            return ToolCall("click", {"id": target.id}), True
        if what == "pick":
            if role == "dropdown" and "focused" not in target.states:
                return ToolCall("click", {"id": target.id}), False
            call = self._type_ahead(window, intent[4], ("dropdown",))
            return call, call.name == "type"
        # type_into: focus the field, select its old text, then type
        if "focused" not in target.states:
            return ToolCall("click", {"id": target.id}), False
        if target.value and "all-selected" not in target.states:
            return ToolCall("key", {"name": "ctrl+a"}), False
        return ToolCall("type", {"text": intent[4]}), True

    def _type_ahead(self, window: str, name: str, typed_over: tuple[str, ...]) -> ToolCall:
        """Type a name into ``window`` as type-ahead: raise the window, leave a field that
        would take the text as input (any role but ``typed_over``), then type the name. With
        ``lead=" "`` (the family's ``copy_spaces``, set by the tiny recipe) it types the name with
        the space it is read with in the instruction, so a model that copies tokens writes the
        tokens it read (the apps ignore the space)."""
        shown = [e for e in self.seen if e.window == window]
        if not any(e.role == "window" and "focused" in e.states for e in shown):
            app = next(a for a, t in _TITLES.items() if t == window)
            return ToolCall("open_app", {"name": app})
        if any("focused" in e.states and e.role not in ("window", *typed_over) for e in shown):
            return ToolCall("key", {"name": "Escape"})
        return ToolCall("type", {"text": self.lead + name})

    def _jump(self, label: str) -> ToolCall:
        return self._type_ahead("Settings", label, ("checkbox",))

    def _scroll_towards(self, window: str) -> ToolCall:
        """The target is out of view: scroll down while there is more below, else to the top."""
        box = next(e for e in self.seen if e.window == window and e.role in ("list", "form"))
        m = re.search(r"(\d+)-(\d+) of (\d+)", box.rest)
        more_below = bool(m) and int(m.group(2)) < int(m.group(3))
        return ToolCall("scroll", {"id": box.id, "amount": 3 if more_below else -20})

    def _slip(self) -> ToolCall:
        r = self.rng.random()
        if r < 0.4 and self.seen:
            return ToolCall("click", {"id": self.rng.choice(self.seen).id})
        if r < 0.7:
            return ToolCall("open_app", {"name": self.rng.choice(sorted(_TITLES))})
        boxes = [e for e in self.seen if e.role in ("list", "form")]
        if r < 0.9 and boxes:
            return ToolCall(
                "scroll", {"id": self.rng.choice(boxes).id, "amount": self.rng.choice((-3, 3))}
            )
        return ToolCall("key", {"name": self.rng.choice(("Escape", "Tab"))})


class ComputerRandomAgent:
    """Uniformly random actions over what is on screen: the chance floor."""

    def __init__(self, seed: int = 0, done_prob: float = 0.1) -> None:
        self.rng, self.done_prob = random.Random(seed), done_prob
        self.seen: list[Seen] = []

    def act(self, observation: str) -> ToolCall:
        tree = parse_tree(observation)
        if tree is not None:
            self.seen = tree
        if self.rng.random() < self.done_prob:
            return ToolCall("done", {})
        ids = [e.id for e in self.seen] or [1]
        tool = self.rng.choice(("click", "click", "type", "key", "scroll", "open_app"))
        if tool == "click":
            return ToolCall("click", {"id": self.rng.choice(ids)})
        if tool == "type":
            return ToolCall("type", {"text": self.rng.choice(("hello", "notes.txt", "a", "ok"))})
        if tool == "key":
            return ToolCall("key", {"name": self.rng.choice(KEYS)})
        if tool == "scroll":
            return ToolCall(
                "scroll", {"id": self.rng.choice(ids), "amount": self.rng.choice((-3, 3))}
            )
        return ToolCall("open_app", {"name": self.rng.choice(sorted(_TITLES))})
