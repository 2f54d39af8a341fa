"""Desktop tasks: a random starting desktop, an instruction, and the goal state it implies.

Tiers (fewest actions an expert needs, ``done()`` not counted):
  easy    1-3: toggle a visible checkbox, pick from a visible dropdown, delete a visible file
  medium  3-6: settings below the fold (scrolling), a text setting, rename a file, create a file
  hard    6-9: replace or append to a file's text, or two tasks from easy/medium at once

Held-out split: by instruction text. A stable hash of the instruction puts ~20% of all
instructions in the test split, so a test goal ("Turn on Bluetooth.", "Rename plan.md to
trip.md.") is never a train goal, whatever the starting desktop.
"""

from __future__ import annotations

import copy
import json
import random
import zlib
from typing import Any

from turnrl.envs.computer.apps import APPS, SETTINGS

TIERS = ("easy", "medium", "hard")
_STEMS = (
    "notes", "todo", "draft", "budget", "ideas", "report", "letter", "recipes", "plan", "log",
    "music", "trip", "books", "old", "readme", "agenda", "poem", "shopping", "photos", "taxes",
    "garden", "movies", "invoice", "resume", "contacts", "diary", "menu", "goals", "lessons",
    "chores", "gifts", "bills", "workout", "quotes", "story", "guests",
)  # fmt: skip
# 108 names: enough that a file task is learned by reading the name, not by remembering it
FILE_NAMES = tuple(f"{stem}.{ext}" for stem in _STEMS for ext in ("txt", "md", "csv"))
PHRASES = (
    "buy milk", "call mom", "meeting at noon", "pay rent", "water the plants", "book flights",
    "fix the bike", "read chapter two", "send the report", "clean the kitchen", "walk the dog",
    "renew passport", "plan the party", "back up photos", "learn french", "update resume",
)  # fmt: skip
USERNAMES = ("ana", "kim.lee", "omar", "li.wei", "sam99", "jo", "priya", "max.b", "noor", "ivan")
_VISIBLE = 6  # settings rows shown before scrolling (SettingsApp.view)
_KINDS = {
    "easy": ("toggle", "choose", "delete"),
    "medium": ("toggle_low", "choose_low", "text_setting", "rename", "create"),
    "hard": ("edit", "append", "combo"),
}


def split_of(instruction: str, test_fraction: float) -> str:
    return "test" if zlib.crc32(instruction.encode()) % 1000 < test_fraction * 1000 else "train"


def random_initial(rng: random.Random, max_files: int) -> dict[str, Any]:
    files = rng.sample(FILE_NAMES, rng.randint(3, max_files))
    settings: dict[str, bool | str] = {}
    for s in SETTINGS:
        if s.role == "checkbox":
            settings[s.key] = rng.random() < 0.5
        elif s.role == "dropdown":
            settings[s.key] = rng.choice(s.options)
        else:
            user = rng.choice(USERNAMES)
            settings[s.key] = user if s.key == "username" else f"{user}@mail.test"
    open_apps = [rng.choice(sorted(APPS))] if rng.random() < 0.3 else []
    return {
        "files": {f: rng.choice(PHRASES) for f in files},
        "settings": settings,
        "open_apps": open_apps,
    }


def make_part(kind: str, rng: random.Random, state: dict[str, Any]) -> tuple[dict, str]:
    """Pick one change of ``kind``; adjust ``state`` (the starting desktop) so the change is
    needed; return the part's parameters and its instruction."""
    files, settings = state["files"], state["settings"]
    visible = [s for s in SETTINGS[:_VISIBLE]]
    low = [s for s in SETTINGS[_VISIBLE:]]
    if kind in ("toggle", "toggle_low"):
        s = rng.choice([s for s in (visible if kind == "toggle" else low) if s.role == "checkbox"])
        on = rng.random() < 0.5
        settings[s.key] = not on
        return {
            "kind": "toggle",
            "key": s.key,
            "value": on,
        }, f"Turn {'on' if on else 'off'} {s.label}."
    if kind in ("choose", "choose_low"):
        s = rng.choice([s for s in (visible if kind == "choose" else low) if s.role == "dropdown"])
        value = rng.choice(s.options)
        settings[s.key] = rng.choice([o for o in s.options if o != value])
        return {"kind": "choose", "key": s.key, "value": value}, f"Set {s.label} to {value}."
    if kind == "text_setting":
        s = rng.choice([s for s in SETTINGS if s.role == "textbox"])
        user = rng.choice(USERNAMES)
        value = user if s.key == "username" else f"{user}@mail.test"
        if settings[s.key] == value:
            settings[s.key] = rng.choice([u for u in USERNAMES if u != user])
        return {
            "kind": "text_setting",
            "key": s.key,
            "value": value,
        }, f'Change {s.label} to "{value}".'
    if kind == "delete":
        name = rng.choice(sorted(files)[:5])
        return {"kind": "delete", "name": name}, f"Delete the file {name}."
    if kind == "rename":
        old = rng.choice(sorted(files))
        new = rng.choice([f for f in FILE_NAMES if f not in files])
        return {"kind": "rename", "name": old, "new_name": new}, f"Rename {old} to {new}."
    if kind == "create":
        name = rng.choice([f for f in FILE_NAMES if f not in files])
        text = rng.choice(PHRASES)
        return {
            "kind": "create",
            "name": name,
            "text": text,
        }, f'Create a file {name} containing "{text}".'
    name = rng.choice(sorted(files))
    text = rng.choice([p for p in PHRASES if p != files[name]])
    if kind == "edit":
        return {
            "kind": "edit",
            "name": name,
            "text": text,
        }, f'Replace the text of {name} with "{text}".'
    assert kind == "append", kind
    return {
        "kind": "append",
        "name": name,
        "text": text,
    }, f'Add the line "{text}" at the end of {name}.'


def apply_part(part: dict, goal: dict[str, Any]) -> None:
    """The goal state: the starting state with the part's change made."""
    files, settings = goal["files"], goal["settings"]
    kind = part["kind"]
    if kind in ("toggle", "choose", "text_setting"):
        settings[part["key"]] = part["value"]
    elif kind == "delete":
        del files[part["name"]]
    elif kind == "rename":
        files[part["new_name"]] = files.pop(part["name"])
    elif kind in ("create", "edit"):
        files[part["name"]] = part["text"]
    else:
        files[part["name"]] = files[part["name"]] + "\n" + part["text"]


def make_task(rng: random.Random, tier: str) -> dict[str, Any]:
    """One task payload: instruction, parts, initial state and goal state."""
    kind = rng.choice(_KINDS[tier])
    state = random_initial(rng, max_files=5 if tier == "easy" else 7)
    if kind == "combo":
        first, second = rng.sample(("toggle", "choose", "delete", "text_setting", "create"), 2)
        kinds = [first, second]
    else:
        kinds = [kind]
    parts, sentences = [], []
    for k in kinds:
        part, sentence = make_part(k, rng, state)
        parts.append(part)
        sentences.append(sentence)
    goal = {"files": dict(state["files"]), "settings": dict(state["settings"])}
    for part in parts:
        apply_part(part, goal)
    return {
        "instruction": " Then ".join(
            x if i == 0 else x[0].lower() + x[1:] for i, x in enumerate(sentences)
        ),
        "tier": tier,
        "kind": kind,
        "parts": parts,
        "initial": copy.deepcopy(state),
        "goal": goal,
    }


def generate(
    split: str, n: int, tiers: tuple[str, ...], test_fraction: float, seed: int
) -> list[dict]:
    """``n`` distinct payloads of ``split``, tiers taken in turn, deterministic in ``seed``."""
    rng = random.Random(f"computer-tasks-{seed}")
    out: list[dict] = []
    seen: set[str] = set()
    for _ in range(200 * n + 1000):
        if len(out) == n:
            break
        payload = make_task(rng, tiers[len(out) % len(tiers)])
        key = json.dumps(payload, sort_keys=True)
        if split_of(payload["instruction"], test_fraction) == split and key not in seen:
            seen.add(key)
            out.append(payload)
    assert len(out) == n, f"only {len(out)} {split} tasks for tiers {tiers}"
    return out
