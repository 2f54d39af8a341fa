"""The documented domains of the built-in task families: which inputs a function promises to
handle, so that inputs drawn at grading stay inside them.

The differential replay (``differential.py``) draws fresh inputs around the tests' own and
keeps their structure (signs, sortedness, equal arguments, characters of the same class). Some
contracts say more than a drawn input can guess: a binary search takes a *sorted* list, a
Roman numeral parser a *well-formed* numeral, a clock parser ``"HH:MM"``. Outside the domain
the gold solution's answer is an accident of its form, and a correct fix of another form
(a ``bisect`` search, a regular-expression decoder) may answer otherwise: such inputs must
never decide a verdict. Each predicate below states a module's domain as its docstring and
tests give it, for one callable (function, class name for the constructor, or method name),
over the call's arguments as plain Python values (an object the scenario made earlier is a
:class:`Ref`).

A task gets its family's predicates only when its gold module *is* the corpus module (a task
built by hand around a module of the same name gets none).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

CORPUS_DIR = Path(__file__).parent / "corpus"
Predicate = Callable[..., bool]


class Ref:
    """An object made earlier in the scenario, passed as an argument."""

    def __init__(self, index: int) -> None:
        self.index = index


def decode(x: Any) -> Any:
    """Tagged JSON (``harness.encode_plain``) as plain Python values."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict) or len(x) != 1:
        return x
    ((tag, v),) = x.items()
    if tag == "int":
        return int(v)
    if tag == "float":
        return float(v)
    if tag == "tuple":
        return tuple(decode(e) for e in v)
    if tag == "dict":
        return {_hashable(decode(k)): decode(e) for k, e in v}
    if tag == "set":
        return {_hashable(decode(e)) for e in v}
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "ref":
        return Ref(v)
    return x


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


def _ints(xs: Any) -> bool:
    return isinstance(xs, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in xs
    )


def _numbers(xs: Any) -> bool:
    return isinstance(xs, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in xs
    )


def _grid(m: Any, cells: Callable[[Any], bool]) -> bool:
    """A non-empty rectangular list of non-empty rows whose cells pass ``cells``."""
    return (
        isinstance(m, list)
        and len(m) > 0
        and all(isinstance(r, list) and r for r in m)
        and len({len(r) for r in m}) == 1
        and all(cells(v) for r in m for v in r)
    )


_ROMAN = re.compile(r"M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")
_HHMM = re.compile(r"\d\d:\d\d")
_VERSION = re.compile(r"\d+(\.\d+)*")


def _roman(s: Any) -> bool:
    return isinstance(s, str) and s != "" and _ROMAN.fullmatch(s) is not None


def _sorted(xs: Any) -> bool:
    return _numbers(xs) and all(a <= b for a, b in zip(xs, xs[1:]))


def _interval(x: Any) -> bool:
    return isinstance(x, list | tuple) and len(x) == 2 and _ints(x) and x[0] <= x[1]


def _base_digits(text: Any, base: Any) -> bool:
    """``text`` is an optional minus sign and one or more digits of ``base``."""
    if not isinstance(text, str) or not isinstance(base, int) or not 2 <= base <= 36:
        return False
    body = text.strip().lower().removeprefix("-")
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[:base]
    return body != "" and all(c in digits for c in body)


# module -> callable -> predicate over its arguments
FAMILIES: dict[str, dict[str, Predicate]] = {
    "base_convert": {
        "from_base": _base_digits,
    },
    "bsearch": {
        "binary_search": lambda xs, target: _sorted(xs),
        "lower_bound": lambda xs, target: _sorted(xs),
        "count_in_range": lambda xs, low, high: _sorted(xs) and low <= high,
    },
    "caesar": {
        "shift_char": lambda ch, k: isinstance(ch, str) and len(ch) == 1,
    },
    "clock": {
        "parse": lambda hhmm: isinstance(hhmm, str) and _HHMM.fullmatch(hhmm) is not None,
        "add_minutes": lambda hhmm, delta: (
            isinstance(hhmm, str) and _HHMM.fullmatch(hhmm) is not None
        ),
        "minutes_between": lambda a, b: all(
            isinstance(x, str) and _HHMM.fullmatch(x) is not None for x in (a, b)
        ),
    },
    "intervals": {
        "merge": lambda xs: isinstance(xs, list) and all(_interval(x) for x in xs),
        "total_length": lambda xs: isinstance(xs, list) and all(_interval(x) for x in xs),
        "overlaps": lambda a, b: _interval(a) and _interval(b),
        "contains": lambda xs, x: isinstance(xs, list) and all(_interval(i) for i in xs),
    },
    "life": {
        "neighbors": lambda g, r, c: (
            _grid(g, lambda v: v in (0, 1)) and 0 <= r < len(g) and 0 <= c < len(g[0])
        ),
        "step": lambda g: _grid(g, lambda v: v in (0, 1)),
        "population": lambda g: _grid(g, lambda v: v in (0, 1)),
    },
    "matrix": {
        "transpose": lambda m: _grid(m, lambda v: isinstance(v, int | float)),
        "matmul": lambda a, b: (
            _grid(a, lambda v: isinstance(v, int | float))
            and _grid(b, lambda v: isinstance(v, int | float))
        ),
        "trace": lambda m: _grid(m, lambda v: isinstance(v, int | float)) and len(m) == len(m[0]),
        "scale": lambda m, k: _grid(m, lambda v: isinstance(v, int | float)),
    },
    "roman": {
        "from_roman": _roman,
    },
    "rle": {
        "decode": lambda code: (
            isinstance(code, str) and re.fullmatch(r"([1-9]\d*\D)*", code) is not None
        ),
    },
    "versions": {
        "parse_version": lambda t: isinstance(t, str) and _VERSION.fullmatch(t) is not None,
        "compare": lambda a, b: all(
            isinstance(x, str) and _VERSION.fullmatch(x) is not None for x in (a, b)
        ),
        "latest": lambda vs: (
            isinstance(vs, list)
            and len(vs) > 0
            and all(isinstance(x, str) and _VERSION.fullmatch(x) is not None for x in vs)
        ),
        "bump": lambda v, part: (
            isinstance(v, str)
            and _VERSION.fullmatch(v) is not None
            and 0 <= part < len(v.split("."))
        ),
    },
}


@cache
def _corpus_source(module: str) -> str | None:
    path = CORPUS_DIR / f"{module}.py"
    return path.read_text() if path.is_file() else None


def for_task(payload: Mapping[str, Any]) -> dict[str, Predicate]:
    """The domain predicates of a task's family, when its gold module is the corpus module."""
    module = payload.get("module")
    if not isinstance(module, str) or module not in FAMILIES:
        return {}
    gold = payload.get("gold_patch", {}).get(f"{module}.py")
    if gold is None or gold != _corpus_source(module):
        return {}
    return FAMILIES[module]
