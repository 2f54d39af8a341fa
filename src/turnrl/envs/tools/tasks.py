"""Task generator for the tool-API env: a small world (files, calendar, bank) and a goal in words.

Each template draws a world and writes three things into the task payload: ``init`` (rows that
seed the episode's database), ``goal`` (the rows the database must hold at the end, computed
here in plain Python, independently of the env's tool code) and ``solution`` (the tool calls a
scripted expert makes; the agent never sees the payload).

Tiers: ``easy`` templates need 1-2 tool calls with one-line observations (a tiny model with a
2048-token context can do them); ``hard`` ones need 3-6 calls, reading before writing.

Held-out split (``held_out``): with ``"vocabulary"`` (the default) ``train`` and ``test`` use
the same templates but disjoint vocabularies (file names, folders, words, event titles, account
names), so a test task never shares an entity name with a training task. With ``"statement"``
both use the training vocabulary and a stable hash of the goal statement puts ~20 % of all
statements in ``test``, so a test goal is never a training goal but its words were seen: the
split for a model trained from scratch, whose tokenizer and embeddings know only training text.
Generation is deterministic in (split, seed, index).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from turnrl.envs.base import hash_split
from turnrl.types import Task

DAYS = ("mon", "tue", "wed", "thu", "fri")
HOURS = tuple(range(9, 18))  # working hours used by generated events


@dataclass(frozen=True)
class Vocab:
    folders: tuple[str, ...]
    stems: tuple[str, ...]
    words: tuple[str, ...]
    titles: tuple[str, ...]
    accounts: tuple[str, ...]
    payees: tuple[str, ...]


VOCAB = {
    "train": Vocab(
        folders=("notes", "docs", "photos", "music", "drafts"),
        stems=("todo", "ideas", "plan", "draft", "budget", "recipe", "list", "log"),
        words=("apple", "river", "stone", "cloud", "pepper", "violet", "copper", "meadow"),
        titles=("Standup", "Dentist", "Gym", "Lunch", "Review", "Call Mom", "Piano"),
        accounts=("checking", "savings", "travel", "rent"),
        payees=("acme", "globex", "hooli"),
    ),
    "test": Vocab(
        folders=("reports", "letters", "archive", "projects", "misc"),
        stems=("memo", "summary", "outline", "agenda", "journal", "sketch", "minutes", "quote"),
        words=("amber", "falcon", "harbor", "maple", "orbit", "tundra", "cobalt", "lagoon"),
        titles=("Yoga", "Interview", "Haircut", "Demo", "Retro", "Book club", "Vet"),
        accounts=("payroll", "reserve", "holiday", "taxes"),
        payees=("initech", "umbrella", "vandelay"),
    ),
}

Call = tuple[str, dict[str, Any]]  # (tool name, arguments)


@dataclass
class Draft:
    statement: str
    domains: tuple[str, ...]
    init: dict[str, list[dict[str, Any]]]
    goal: dict[str, list[dict[str, Any]]]
    solution: list[Call]


# ---------------------------------------------------------------- world pieces


def _files(rng: random.Random, v: Vocab, n: int, folders: list[str]) -> list[dict[str, Any]]:
    paths: set[str] = set()
    while len(paths) < n:
        paths.add(f"{rng.choice(folders)}/{rng.choice(v.stems)}.txt")
    return [{"path": p, "content": " ".join(rng.sample(v.words, 2))} for p in sorted(paths)]


def _events(rng: random.Random, v: Vocab, days: list[str], per_day: int) -> list[dict[str, Any]]:
    rows, eid = [], 1
    for day in days:
        for title, hour in zip(rng.sample(v.titles, per_day), sorted(rng.sample(HOURS, per_day))):
            rows.append({"id": eid, "title": title, "day": day, "hour": hour})
            eid += 1
    return rows


def _accounts(rng: random.Random, names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "balance": 10 * rng.randint(5, 40)} for n in names]


def _transfer(goal: dict, src: str, dst: str, amount: int) -> None:
    for acc in goal["accounts"]:
        if acc["name"] == src:
            acc["balance"] -= amount
        if acc["name"] == dst:
            acc["balance"] += amount
    goal.setdefault("transfers", []).append({"src": src, "dst": dst, "amount": amount})


def _empty() -> dict[str, list[dict[str, Any]]]:
    return {"files": [], "events": [], "accounts": [], "transfers": []}


def _world(**tables: list[dict[str, Any]]) -> tuple[dict, dict]:
    init = _empty()
    init.update(tables)
    return init, copy.deepcopy(init)


# ---------------------------------------------------------------- easy (1-2 calls)


def files_delete(rng: random.Random, v: Vocab) -> Draft:
    files = _files(rng, v, 3, list(v.folders[:2]))
    target = rng.choice(files)["path"]
    init, goal = _world(files=files)
    goal["files"] = [f for f in goal["files"] if f["path"] != target]
    return Draft(
        f'Delete the file "{target}".', ("files",), init, goal, [("delete_file", {"path": target})]
    )


def files_write(rng: random.Random, v: Vocab) -> Draft:
    files = _files(rng, v, 2, list(v.folders[:2]))
    taken = {f["path"] for f in files}
    path = next(
        p
        for p in (f"{rng.choice(v.folders)}/{rng.choice(v.stems)}.txt" for _ in range(100))
        if p not in taken
    )
    text = " ".join(rng.sample(v.words, 2))
    init, goal = _world(files=files)
    goal["files"].append({"path": path, "content": text})
    return Draft(
        f'Create the file "{path}" with the text "{text}".',
        ("files",),
        init,
        goal,
        [("write_file", {"path": path, "content": text})],
    )


def files_move(rng: random.Random, v: Vocab) -> Draft:
    files = _files(rng, v, 2, list(v.folders[:2]))
    src = rng.choice(files)["path"]
    taken = {f["path"] for f in files}
    dst = next(
        p for p in (f"{v.folders[2]}/{s}.txt" for s in rng.sample(v.stems, 3)) if p not in taken
    )
    init, goal = _world(files=files)
    for f in goal["files"]:
        if f["path"] == src:
            f["path"] = dst
    return Draft(
        f'Rename "{src}" to "{dst}".',
        ("files",),
        init,
        goal,
        [("move_file", {"src": src, "dst": dst})],
    )


def cal_add(rng: random.Random, v: Vocab) -> Draft:
    day = rng.choice(DAYS)
    events = _events(rng, v, [day], 2)
    busy = {e["hour"] for e in events}
    hour = rng.choice([h for h in HOURS if h not in busy])
    title = rng.choice([t for t in v.titles if t not in {e["title"] for e in events}])
    init, goal = _world(events=events)
    goal["events"].append({"title": title, "day": day, "hour": hour})
    return Draft(
        f"Add an event '{title}' on {day} at {hour}:00.",
        ("calendar",),
        init,
        goal,
        [("add_event", {"title": title, "day": day, "hour": hour})],
    )


def cal_cancel(rng: random.Random, v: Vocab) -> Draft:
    days = rng.sample(DAYS, 2)
    events = _events(rng, v, days, 2)
    target = rng.choice(events)
    init, goal = _world(events=events)
    goal["events"] = [e for e in goal["events"] if e["id"] != target["id"]]
    return Draft(
        f"Cancel the event '{target['title']}' on {target['day']}.",
        ("calendar",),
        init,
        goal,
        [("list_events", {"day": target["day"]}), ("cancel_event", {"event_id": target["id"]})],
    )


def bank_transfer(rng: random.Random, v: Vocab) -> Draft:
    src, dst = rng.sample(v.accounts, 2)
    accounts = _accounts(rng, [src, dst])
    amount = 5 * rng.randint(1, accounts[0]["balance"] // 5)
    init, goal = _world(accounts=accounts)
    _transfer(goal, src, dst, amount)
    return Draft(
        f'Transfer {amount} from "{src}" to "{dst}".',
        ("bank",),
        init,
        goal,
        [("transfer", {"src": src, "dst": dst, "amount": amount})],
    )


# ---------------------------------------------------------------- hard (3-6 calls)


def files_move_folder(rng: random.Random, v: Vocab) -> Draft:
    d1, other, d2 = rng.sample(v.folders, 3)
    stems = rng.sample(v.stems, 5)
    files = [
        {"path": f"{d}/{s}.txt", "content": " ".join(rng.sample(v.words, 2))}
        for d, s in zip([d1, d1, d1, other, other], stems)
    ]
    init, goal = _world(files=files)
    moves = []
    for f in goal["files"]:
        if f["path"].startswith(d1 + "/"):
            new = d2 + f["path"][len(d1) :]
            moves.append(("move_file", {"src": f["path"], "dst": new}))
            f["path"] = new
    return Draft(
        f"Move every file in {d1}/ into {d2}/, keeping the file names.",
        ("files",),
        init,
        goal,
        [("list_files", {"prefix": d1 + "/"}), *sorted(moves, key=repr)],
    )


def files_find_delete(rng: random.Random, v: Vocab) -> Draft:
    d, other = rng.sample(v.folders, 2)
    word = rng.choice(v.words)
    rest = [w for w in v.words if w != word]
    n_hit = rng.randint(1, 2)
    stems = rng.sample(v.stems, 4)
    files = []
    for i, s in enumerate(stems[:3]):
        content = " ".join([word, rng.choice(rest)] if i < n_hit else rng.sample(rest, 2))
        files.append({"path": f"{d}/{s}.txt", "content": content})
    files.append({"path": f"{other}/{stems[3]}.txt", "content": f"{word} {rng.choice(rest)}"})
    rng.shuffle(files)
    init, goal = _world(files=files)
    in_dir = sorted(f["path"] for f in files if f["path"].startswith(d + "/"))
    hits = sorted(f["path"] for f in files if f["path"] in in_dir and word in f["content"].split())
    goal["files"] = [f for f in goal["files"] if f["path"] not in hits]
    solution: list[Call] = [("list_files", {"prefix": d + "/"})]
    solution += [("read_file", {"path": p}) for p in in_dir]
    solution += [("delete_file", {"path": p}) for p in hits]
    return Draft(
        f"Delete every file in {d}/ whose text contains the word '{word}'. Keep the others.",
        ("files",),
        init,
        goal,
        solution,
    )


def cal_move(rng: random.Random, v: Vocab) -> Draft:
    d1, d2 = rng.sample(DAYS, 2)
    events = _events(rng, v, [d1], 2)
    target = rng.choice(events)
    others = [t for t in v.titles if t not in {e["title"] for e in events}]
    # d2 is busy from 9:00 for a few hours, so "earliest free hour" needs reading the day
    busy = list(range(9, 9 + rng.randint(1, 3)))
    eid = len(events) + 1
    for h, title in zip(busy, rng.sample(others, len(busy))):
        events.append({"id": eid, "title": title, "day": d2, "hour": h})
        eid += 1
    free = next(h for h in HOURS if h not in busy)
    init, goal = _world(events=events)
    for e in goal["events"]:
        if e["id"] == target["id"]:
            e["day"], e["hour"] = d2, free
    return Draft(
        f"Move '{target['title']}' from {d1} to the earliest free hour on {d2} "
        f"(between 9:00 and 17:00).",
        ("calendar",),
        init,
        goal,
        [
            ("list_events", {"day": d1}),
            ("list_events", {"day": d2}),
            ("move_event", {"event_id": target["id"], "day": d2, "hour": free}),
        ],
    )


def cal_clear_day(rng: random.Random, v: Vocab) -> Draft:
    day, other = rng.sample(DAYS, 2)
    events = _events(rng, v, [day, other], 3)
    mine = [e for e in events if e["day"] == day]
    keep = rng.choice(mine)
    init, goal = _world(events=events)
    goal["events"] = [e for e in goal["events"] if e["day"] != day or e["id"] == keep["id"]]
    cancels = [("cancel_event", {"event_id": e["id"]}) for e in mine if e["id"] != keep["id"]]
    return Draft(
        f"Cancel all events on {day} except '{keep['title']}'.",
        ("calendar",),
        init,
        goal,
        [("list_events", {"day": day}), *cancels],
    )


def bank_invoice(rng: random.Random, v: Vocab) -> Draft:
    src = rng.choice(v.accounts)
    payee = rng.choice(v.payees)
    accounts = _accounts(rng, [src, payee])
    amount = 5 * rng.randint(1, accounts[0]["balance"] // 5)
    path = f"invoices/{payee}.txt"
    files = _files(rng, v, 2, list(v.folders[:2])) + [
        {"path": path, "content": f"Invoice: pay {amount} to {payee}."}
    ]
    init, goal = _world(files=files, accounts=accounts)
    _transfer(goal, src, payee, amount)
    goal["files"] = [f for f in goal["files"] if f["path"] != path]
    return Draft(
        f'Pay the invoice in "{path}" from "{src}", then delete the invoice file.',
        ("files", "bank"),
        init,
        goal,
        [
            ("read_file", {"path": path}),
            ("transfer", {"src": src, "dst": payee, "amount": amount}),
            ("delete_file", {"path": path}),
        ],
    )


def bank_split(rng: random.Random, v: Vocab) -> Draft:
    src, a, b = rng.sample(v.accounts, 3)
    accounts = _accounts(rng, [src, a, b])
    accounts[0]["balance"] = 20 * rng.randint(3, 20)  # even, so halves are whole
    half = accounts[0]["balance"] // 2
    init, goal = _world(accounts=accounts)
    _transfer(goal, src, a, half)
    _transfer(goal, src, b, half)
    return Draft(
        f'Transfer half of the balance of "{src}" to "{a}" and the other half to "{b}".',
        ("bank",),
        init,
        goal,
        [
            ("get_balance", {"account": src}),
            ("transfer", {"src": src, "dst": a, "amount": half}),
            ("transfer", {"src": src, "dst": b, "amount": half}),
        ],
    )


TEMPLATES: dict[str, tuple[Callable[[random.Random, Vocab], Draft], ...]] = {
    "easy": (files_delete, files_write, files_move, cal_add, cal_cancel, bank_transfer),
    "hard": (
        files_move_folder,
        files_find_delete,
        cal_move,
        cal_clear_day,
        bank_invoice,
        bank_split,
    ),
}


def generate(
    split: str,
    n: int,
    seed: int = 0,
    tiers: tuple[str, ...] = ("easy", "hard"),
    held_out: Literal["vocabulary", "statement"] = "vocabulary",
) -> list[Task]:
    """``n`` tasks of ``split``, cycling through the templates of ``tiers`` in a fixed order."""
    if split not in VOCAB:
        raise ValueError(f"tools env: unknown split {split!r} (use 'train' or 'test')")
    templates = [(tier, t) for tier in tiers for t in TEMPLATES[tier]]
    tasks = []
    for i in range(n):
        tier, template = templates[i % len(templates)]
        rng = random.Random(f"tools:{split}:{seed}:{i}")
        if held_out == "vocabulary":
            d = template(rng, VOCAB[split])
        else:  # redraw until the statement hashes into this split
            for _ in range(1000):
                d = template(rng, VOCAB["train"])
                if hash_split(d.statement) == split:
                    break
            else:
                raise ValueError(f"tools env: {template.__name__} has no {split} statement")
        payload = {
            "tier": tier,
            "template": template.__name__,
            "statement": d.statement,
            "domains": list(d.domains),
            "init": {k: rows for k, rows in d.init.items() if rows},
            "goal": {k: rows for k, rows in d.goal.items() if rows},
            "solution": [[name, args] for name, args in d.solution],
        }
        tasks.append(Task(f"tools-{split}-{seed}-{i}-{template.__name__}", "tools", payload, split))
    return tasks
