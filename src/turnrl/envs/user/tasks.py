"""Task generator for the simulated-user retail env.

Each task holds a small store database (``init``), the database the conversation must end in
(``goal``, computed here in plain Python), the user's hidden goal (``user``: opening line, the
facts they reveal only when asked, the information they need to be told) and a persona.

Tiers: ``easy`` — order status, cancel a pending order, change an address (the user knows the
order id); ``hard`` — return an item (sometimes asking for a refund the policy forbids),
exchange an item, cancel an order whose id the user does not remember (the agent must search
the user's orders), and a cancellation the policy must refuse (the order is already processed).

Held-out split (``held_out``): with ``"vocabulary"`` (the default) ``train`` and ``test`` draw
names, streets, products and order-id ranges from disjoint pools. With ``"order"`` both draw
from the training pools, order ids from 100 shared numbers (``ORDER_IDS``), and a task belongs
to ``test`` when the customer and the order it is about hash there (~20 % of pairs):
conversations about a customer's order that training never shows, in words a tiny model's
tokenizer (trained on training text only) knows. Why shared ids: with ids held out whole, a
test id is a string the tokenizer never saw, split into pieces the tiny model never copied
(whole-id accuracy 0.000 teacher-forced); a known id is one token, copied 0.45-0.68 of the
time. Why 100: a tiny recipe's 400 demonstrations
name each of 100 ids about four times, so 89 of them became tokens; of 200, 71 never came up
and stayed in pieces, and the trained policy solved order-status questions about those 17
times in 49 against 74 in 85. What stays held out is the conversation: which
id this customer names, and that order's status, items and refund. Deterministic in (split,
seed, index).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from turnrl.envs.base import hash_split
from turnrl.types import Task

ORDER_IDS = range(1000, 1100)  # held_out="order": the ids both splits draw from
METHODS = ("credit_card", "paypal", "gift_card")
REASONS = ("no longer needed", "ordered by mistake")
STYLES = ("terse", "friendly", "impatient")


@dataclass(frozen=True)
class Pool:
    names: tuple[str, ...]
    streets: tuple[str, ...]
    catalog: dict[str, tuple[str, ...]]
    order_ids: range


POOLS = {
    "train": Pool(
        names=(
            "Ava Lee",
            "Ben Ortiz",
            "Chloe Park",
            "Dan Moss",
            "Emma Ruiz",
            "Finn Shaw",
            "Gia Tran",
            "Hugo Bell",
            "Ivy Ford",
            "Jon Pike",
        ),
        streets=("Elm", "Oak", "Pine", "Maple", "Cherry"),
        catalog={
            "mug": ("blue", "red", "green"),
            "lamp": ("white", "black"),
            "scarf": ("wool", "silk"),
            "backpack": ("small", "large"),
            "kettle": ("steel", "copper"),
        },
        order_ids=range(1000, 5000),
    ),
    "test": Pool(
        names=(
            "Kira Dunn",
            "Leo Marsh",
            "Mia Chen",
            "Noah Reid",
            "Olga Sato",
            "Paul Kent",
            "Rosa Diaz",
            "Sam Cole",
            "Tara Wolf",
            "Uma Roy",
        ),
        streets=("Birch", "Cedar", "Willow", "Aspen", "Spruce"),
        catalog={
            "jacket": ("S", "M", "L"),
            "teapot": ("clay", "glass"),
            "headphones": ("black", "silver"),
            "notebook": ("lined", "dotted"),
            "blender": ("mini", "pro"),
        },
        order_ids=range(5000, 10000),
    ),
}


class World:
    """A store: the customer (``me``), two other customers, their orders."""

    def __init__(self, rng: random.Random, pool: Pool, my_orders: list[str]) -> None:
        self.rng, self.pool = rng, pool
        names = rng.sample(pool.names, 3)
        ids = rng.sample(pool.order_ids, 3 + len(my_orders))
        self.rows: dict[str, list[dict[str, Any]]] = {
            "users": [],
            "orders": [],
            "items": [],
            "refunds": [],
            "catalog": [{"item": i, "variant": v} for i, vs in pool.catalog.items() for v in vs],
        }
        self.users = [self._user(k, n) for k, n in enumerate(names)]
        self.me = self.users[0]
        self.my_orders = [self._order(self.me, st, f"#W{ids[k]}") for k, st in enumerate(my_orders)]
        for k, other in enumerate(self.users[1:]):  # distractors: other customers' orders
            self._order(other, rng.choice(["pending", "delivered"]), f"#W{ids[-1 - k]}")

    def _user(self, k: int, name: str) -> dict[str, Any]:
        methods = self.rng.sample(METHODS, 2)
        row = {
            "user_id": f"u{self.rng.randint(10, 99)}{k}",
            "name": name,
            "email": name.lower().replace(" ", ".") + "@mail.com",
            "payment_methods": ",".join(methods),
        }
        self.rows["users"].append(row)
        return row

    def _order(self, user: dict, status: str, order_id: str) -> dict[str, Any]:
        order = {
            "order_id": order_id,
            "user_id": user["user_id"],
            "status": status,
            "address": f"{self.rng.randint(1, 99)} {self.rng.choice(self.pool.streets)} St",
            "payment_method": self.rng.choice(user["payment_methods"].split(",")),
            "cancel_reason": None,
        }
        self.rows["orders"].append(order)
        for item in self.rng.sample(sorted(self.pool.catalog), self.rng.randint(1, 3)):
            self.rows["items"].append(
                {
                    "order_id": order_id,
                    "item": item,
                    "variant": self.rng.choice(self.pool.catalog[item]),
                    "price": 5 * self.rng.randint(2, 30),
                    "status": "ordered",
                }
            )
        return order

    def items(self, order_id: str, rows: dict | None = None) -> list[dict[str, Any]]:
        return [i for i in (rows or self.rows)["items"] if i["order_id"] == order_id]


@dataclass
class Draft:
    world: World
    goal: dict[str, list[dict[str, Any]]]
    target: str  # the order the conversation is about
    opening: str
    facts: dict[str, str]  # what the user reveals when asked (email, order_id, reason, ...)
    required_info: list[str]  # what the agent must tell the user (r_output)
    info_question: str  # what the user asks when the change is done but the info not told
    wants_change: bool  # whether the user wants (and will confirm) a change to the order
    order_hint: str | None = None  # said instead of the order id when the user does not know it
    solution: str = ""  # which expert script solves it


def _row(rows: dict, table: str, **key: Any) -> dict[str, Any]:
    return next(r for r in rows[table] if all(r[k] == v for k, v in key.items()))


def _cancel(goal: dict, world: World, order_id: str, reason: str) -> int:
    order = _row(goal, "orders", order_id=order_id)
    order["status"], order["cancel_reason"] = "cancelled", reason
    amount = sum(i["price"] for i in world.items(order_id, goal))
    goal["refunds"].append(
        {"order_id": order_id, "amount": amount, "method": order["payment_method"]}
    )
    return amount


# ---------------------------------------------------------------- easy


def order_status(rng: random.Random, pool: Pool) -> Draft:
    w = World(rng, pool, [rng.choice(["pending", "processed", "delivered"])])
    o = w.my_orders[0]
    return Draft(
        w,
        copy.deepcopy(w.rows),
        o["order_id"],
        "Hi, what is the status of my order?",
        {"email": w.me["email"], "order_id": o["order_id"]},
        [o["status"]],
        "So what is the status of my order?",
        False,
        solution="status",
    )


def cancel_pending(rng: random.Random, pool: Pool) -> Draft:
    w = World(rng, pool, ["pending"])
    o, reason = w.my_orders[0], rng.choice(REASONS)
    goal = copy.deepcopy(w.rows)
    amount = _cancel(goal, w, o["order_id"], reason)
    return Draft(
        w,
        goal,
        o["order_id"],
        "Hi, I want to cancel an order.",
        {"email": w.me["email"], "order_id": o["order_id"], "reason": reason},
        [str(amount)],
        "How much will be refunded?",
        True,
        solution="cancel",
    )


def change_address(rng: random.Random, pool: Pool) -> Draft:
    w = World(rng, pool, ["pending"])
    o = w.my_orders[0]
    new = f"{rng.randint(10, 99)} {rng.choice(pool.streets)} Ave"  # a number a tiny BPE knows
    goal = copy.deepcopy(w.rows)
    _row(goal, "orders", order_id=o["order_id"])["address"] = new
    return Draft(
        w,
        goal,
        o["order_id"],
        "Hello, I need to change the shipping address of an order.",
        {"email": w.me["email"], "order_id": o["order_id"], "address": new},
        [],
        "Is the address changed now?",
        True,
        solution="address",
    )


# ---------------------------------------------------------------- hard


def return_item(rng: random.Random, pool: Pool) -> Draft:
    w = World(rng, pool, ["delivered"])
    o = w.my_orders[0]
    item = rng.choice(w.items(o["order_id"]))
    goal = copy.deepcopy(w.rows)
    _row(goal, "items", order_id=o["order_id"], item=item["item"])["status"] = "returned"
    goal["refunds"].append(
        {"order_id": o["order_id"], "amount": item["price"], "method": o["payment_method"]}
    )
    opening = "Hi, I'd like to return an item."
    other = [m for m in w.me["payment_methods"].split(",") if m != o["payment_method"]]
    if rng.random() < 0.5:  # a request the policy forbids (rule 5)
        opening = f"Hi, I'd like to return an item, and please refund it to my {other[0]}."
    return Draft(
        w,
        goal,
        o["order_id"],
        opening,
        {"email": w.me["email"], "order_id": o["order_id"], "item": item["item"]},
        [str(item["price"])],
        "How much will I get back?",
        True,
        solution="return",
    )


def exchange_item(rng: random.Random, pool: Pool) -> Draft:
    w = World(rng, pool, ["delivered"])
    o = w.my_orders[0]
    item = rng.choice(w.items(o["order_id"]))
    variant = rng.choice([v for v in pool.catalog[item["item"]] if v != item["variant"]])
    goal = copy.deepcopy(w.rows)
    row = _row(goal, "items", order_id=o["order_id"], item=item["item"])
    row["variant"], row["status"] = variant, "exchange_requested"
    return Draft(
        w,
        goal,
        o["order_id"],
        "Hi, I want to exchange an item for another variant.",
        {
            "email": w.me["email"],
            "order_id": o["order_id"],
            "item": item["item"],
            "variant": variant,
        },
        [],
        "Is the exchange done?",
        True,
        solution="exchange",
    )


def cancel_unknown_id(rng: random.Random, pool: Pool) -> Draft:
    for _ in range(100):  # the target must hold an item no other order of the user has
        w = World(rng, pool, ["delivered", "pending", "processed"])
        o = w.my_orders[1]
        mine = {i["item"] for i in w.items(o["order_id"])}
        theirs = {
            i["item"] for x in (w.my_orders[0], w.my_orders[2]) for i in w.items(x["order_id"])
        }
        if mine - theirs:
            break
    else:
        raise RuntimeError("could not draw a distinguishable order")
    hint_item = sorted(mine - theirs)[0]
    reason = rng.choice(REASONS)
    goal = copy.deepcopy(w.rows)
    amount = _cancel(goal, w, o["order_id"], reason)
    return Draft(
        w,
        goal,
        o["order_id"],
        "Hi, I want to cancel one of my orders.",
        {"email": w.me["email"], "order_id": o["order_id"], "reason": reason},
        [str(amount)],
        "How much will be refunded?",
        True,
        order_hint=f"I don't remember the number. It's the one with the {hint_item}.",
        solution="cancel",
    )


def refuse_cancel(rng: random.Random, pool: Pool) -> Draft:
    w = World(rng, pool, ["processed"])
    o = w.my_orders[0]
    return Draft(
        w,
        copy.deepcopy(w.rows),
        o["order_id"],
        "Hi, I want to cancel an order.",
        {"email": w.me["email"], "order_id": o["order_id"], "reason": rng.choice(REASONS)},
        ["processed"],
        "Can you cancel it or not?",
        True,
        solution="refuse",
    )


TEMPLATES: dict[str, tuple[Callable[[random.Random, Pool], Draft], ...]] = {
    "easy": (order_status, cancel_pending, change_address),
    "hard": (return_item, exchange_item, cancel_unknown_id, refuse_cancel),
}


def generate(
    split: str,
    n: int,
    seed: int = 0,
    tiers: tuple[str, ...] = ("easy", "hard"),
    held_out: Literal["vocabulary", "order"] = "vocabulary",
) -> list[Task]:
    """``n`` tasks of ``split``, cycling through the templates of ``tiers``."""
    if split not in POOLS:
        raise ValueError(f"user env: unknown split {split!r} (use 'train' or 'test')")
    templates = [(tier, t) for tier in tiers for t in TEMPLATES[tier]]
    shared = dataclasses.replace(POOLS["train"], order_ids=ORDER_IDS)  # held_out="order"
    tasks = []
    for i in range(n):
        tier, template = templates[i % len(templates)]
        rng = random.Random(f"user:{split}:{seed}:{i}")
        if held_out == "vocabulary":
            d = template(rng, POOLS[split])
        else:  # redraw until the customer and order the task is about hash into this split
            d = template(rng, shared)
            while hash_split(f"{d.world.me['name']}|{d.target}") != split:
                d = template(rng, shared)
        persona = {
            "name": d.world.me["name"],
            "style": rng.choice(STYLES),
            "patience": rng.randint(3, 4),
        }
        orders = [x for x in d.world.rows["orders"] if x["user_id"] == d.world.me["user_id"]]
        payload = {
            "tier": tier,
            "template": template.__name__,
            "init": d.world.rows,
            "goal": d.goal,
            "user": {
                "opening": d.opening,
                "facts": d.facts,
                "order_hint": d.order_hint,
                "required_info": d.required_info,
                "info_question": d.info_question,
                "wants_change": d.wants_change,
                "target": d.target,
            },
            "persona": persona,
            "solution": {
                "kind": d.solution,
                "user_id": d.world.me["user_id"],
                "my_orders": [x["order_id"] for x in orders],
            },
            "seed": rng.randint(0, 2**31 - 1),
        }
        tasks.append(Task(f"user-{split}-{seed}-{i}-{template.__name__}", "user", payload, split))
    return tasks
