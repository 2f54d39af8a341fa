"""Tier 0: generated one-function tasks whose docstring gives the formula the function must
compute.

A task is a module with one function, one wrong operator in its ``return`` line, and tests.
The docstring states the intended formula ("Return price - cost."), so the bug is visible in
the code itself: the curriculum's first rung, where a model trained from scratch can learn the
whole loop (read, edit, check, submit) and *generalise* it, since every task has new names.
Example::

    def margin(price, cost):
        \"\"\"Return price - cost.\"\"\"
        return price + cost

The fix copies an operator from the docstring into the code. (An earlier version stated the
intent in words, "Return price minus cost."; the default run's tiny model did not learn the
word-to-operator mapping within its SFT budget.) The functions live in
a few shared module files, like the files of one repository.

Tasks are generated in-process from a seed (no pytest run is needed: the test expectations are
computed from the operators, and inputs are chosen so the bug changes at least one visible
assertion). The held-out split uses function names the train split never shows.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from typing import Any

from turnrl.types import Task

# Operator families: a bug replaces an operator with another of the same family.
ARITH: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "plus": ("+", operator.add),
    "minus": ("-", operator.sub),
    "times": ("*", operator.mul),
}
COMPARE: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "less than": ("<", operator.lt),
    "at most": ("<=", operator.le),
    "greater than": (">", operator.gt),
    "at least": (">=", operator.ge),
    "equal to": ("==", operator.eq),
    "not equal to": ("!=", operator.ne),
}
LOGIC: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "and": ("and", lambda a, b: a and b),
    "or": ("or", lambda a, b: a or b),
}

FUNCTION_NAMES = """
total margin score balance budget offset spread gain scale delta bonus charge reward shift
ratio level amount height weight length volume width rating index count surplus deficit
profit loss credit debit salary wage fee tax tip refund change stock supply demand output
input energy speed pace gap lead lag tempo power heat voltage current pressure depth range
reach area span limit quota share slice portion chunk batch load cargo freight toll rent
lease price cost value worth measure degree grade rank tally sum net gross base peak floor
ceiling target goal mark bound edge cap margin_of fits allowed enough eligible valid ready
due open active ahead behind over under inside outside above below close match equal
differs overdue passing winning urgent early late safe risky cheap costly heavy light
""".split()
# Modules a function lives in: few and shared by both splits, like the files of one repository
# (an agent learns to find its way around a repo; the functions in it are what is new).
MODULE_NAMES = "pricing payroll billing stock shipping scoring rules checks physics stats".split()
PARAM_NAMES = """
x y a b n m k count total price cost size width height left right low high start end rate
score limit base step age level speed weight points items days hours
""".split()
TEST_FRACTION = 0.2  # of the function names: held out for the test split
POOL_SIZE = {"train": 2000, "test": 200}


def _names(split: str) -> list[str]:
    names = sorted(set(FUNCTION_NAMES))
    random.Random("micro-names").shuffle(names)
    cut = round(TEST_FRACTION * len(names))
    return names[:cut] if split == "test" else names[cut:]


def _values(family: dict, rng: random.Random, k: int | None) -> list[tuple[Any, Any]]:
    """Inputs: every boolean pair, or random integers plus the three orders (x < y, x == y,
    x > y) that tell each comparison from the others; ``k`` fixes the second argument."""
    if family is LOGIC:
        pairs = [(a, b) for a in (True, False) for b in (True, False)]
    else:
        v = rng.randint(3, 9) if k is None else k
        pairs = [(v - 1, v), (v, v), (v + 1, v)]
        pairs += [(rng.randint(0, 9), rng.randint(0, 9) if k is None else k) for _ in range(4)]
    rng.shuffle(pairs)
    return pairs


def micro_task(index: int, split: str) -> Task:
    """The ``index``-th generated tier-0 task of ``split`` (deterministic)."""
    rng = random.Random(f"micro/{split}/{index}")
    family, kind = rng.choice(
        [(ARITH, "arith_op")] * 2 + [(COMPARE, "compare_op")] * 2 + [(LOGIC, "bool_op")]
    )
    word = rng.choice(sorted(family))
    wrong = rng.choice(sorted(w for w in family if w != word))
    op, fn = family[word]
    bad_op, bad_fn = family[wrong]
    name = rng.choice(_names(split))
    module = rng.choice(MODULE_NAMES)
    a, b = rng.sample(PARAM_NAMES, 2)
    with_constant = family is not LOGIC and rng.random() < 0.4
    k = rng.randint(2, 9) if with_constant else None
    pairs = _values(family, rng, k)
    if with_constant:  # f(a) compares or combines a with a fixed number
        params, rhs, args = a, str(k), lambda x, y: f"{x}"
    else:
        params, rhs, args = f"{a}, {b}", b, lambda x, y: f"{x}, {y}"
    formula = f"{a} {op} {rhs}"
    doc = f"Return {formula}." if family is not COMPARE else f"Return whether {formula}."

    def source(o: str) -> str:
        return f'def {name}({params}):\n    """{doc}"""\n    return {a} {o} {rhs}\n'

    # Three tests of two asserts; at least one assert (in a visible test) catches the bug.
    revealing = [p for p in pairs if fn(*p) != bad_fn(*p)]
    if not revealing:  # cannot happen for these families; kept as a guard for new operators
        raise RuntimeError(f"no input separates {op!r} from {bad_op!r}")
    chosen = [rng.choice(revealing)] + rng.sample(pairs, min(5, len(pairs)))
    test_path, path = f"test_{module}.py", f"{module}.py"
    tests, failing, calls = [], [], []
    for i, label in enumerate(("one", "two", "three")):
        asserts = chosen[2 * i : 2 * i + 2] or chosen[:1]
        body = "".join(f"    assert {name}({args(x, y)}) == {fn(x, y)!r}\n" for x, y in asserts)
        tests.append(f"def test_{label}():\n{body}")
        if any(fn(x, y) != bad_fn(x, y) for x, y in asserts):
            failing.append(f"test_{label}")
        # the calls this test makes, as the grader's differential check records them
        steps = [
            {
                "call": {"attr": [module, name]},
                "args": [x] if with_constant else [x, y],
                "kwargs": {},
            }
            for x, y in asserts
        ]
        calls.append({"test": f"{test_path}::test_{label}", "steps": steps})
    header = f"from {module} import {name}\n\n\n"
    visible = [tests[0]] + [rng.choice(tests[1:])]
    ids = [f"{test_path}::test_{label}" for label in ("one", "two", "three")]
    payload: dict[str, Any] = {
        "repo": {path: source(bad_op)},
        "visible_tests": {test_path: header + "\n\n".join(visible)},
        "hidden_tests": {test_path: header + "\n\n".join(tests)},
        "fail_to_pass": [t for t in ids if t.split("::")[1] in failing],
        "pass_to_pass": [t for t in ids if t.split("::")[1] not in failing],
        "gold_patch": {path: source(op)},
        "tier": 0,
        "mutations": [
            {
                "kind": kind,
                "function": name,
                "line": 3,
                "original_line": f"    return {a} {op} {rhs}",
                "mutated_line": f"    return {a} {bad_op} {rhs}",
            }
        ],
        "module": module,
        "calls": calls,
    }
    return Task(id=f"code-micro-{split}-{index:04d}", env="code", payload=payload, split=split)


def micro_tasks(split: str) -> list[Task]:
    """The tier-0 pool of ``split``: ``POOL_SIZE[split]`` generated tasks."""
    return [micro_task(i, split) for i in range(POOL_SIZE[split])]
