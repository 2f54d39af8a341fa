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

Each family also has *generators* for its module-level functions: a draw of arguments from
the function's domain (the replay makes ``DRAWS_PER_FUNCTION`` such calls per grading beside
the variants of the tests' own). They mix broad draws with the values where bugs live in such
code (boundaries, zero, equal arguments, centuries, fractions of a score), so that no table of
the tests' answers passes a grading while the code around it is wrong.

A task gets its family's domain only when its gold module *is* the corpus module (a task
built by hand around a module of the same name gets none).
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

CORPUS_DIR = Path(__file__).parent / "corpus"
Predicate = Callable[..., bool]
Generator = Callable[[random.Random], tuple]


@dataclass(frozen=True)
class Domain:
    """A family's domain: predicates on a callable's arguments, generators of arguments for
    its module-level functions, both by callable name."""

    predicates: Mapping[str, Predicate] = field(default_factory=dict)
    generators: Mapping[str, Generator] = field(default_factory=dict)
    # callable -> positions of its arguments whose numbers may be fractions (a score of
    # 80.5): the tests' own values there are also moved by a fraction, where a boundary
    # between two of them hides
    fractional: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


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


def encode(x: Any) -> Any:
    """Plain Python values as tagged JSON (the inverse of :func:`decode`)."""
    if x is None or isinstance(x, bool | str):
        return x
    if isinstance(x, int):
        return x if abs(x) < 2**53 else {"int": str(x)}
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else {"float": repr(x)}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, tuple):
        return {"tuple": [encode(v) for v in x]}
    if isinstance(x, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in x.items()]}
    raise TypeError(f"cannot encode {type(x).__name__}")


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


def _grid_check(m: Any, cells: Callable[[Any], bool]) -> bool:
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


# ---------------------------------------------------------------------------- generators
#
# Small helpers first: each takes the grading's random generator.


def _int(rng: random.Random, lo: int, hi: int, *special: int) -> int:
    """Uniform in [lo, hi], or (one time in three) one of ``special``."""
    if special and rng.random() < 1 / 3:
        return rng.choice(special)
    return rng.randint(lo, hi)


def _int_list(
    rng: random.Random, n_max: int, lo: int = -20, hi: int = 20, n_min: int = 0
) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(n_min, n_max))]


def _number(rng: random.Random, lo: float, hi: float) -> int | float:
    """An int, a half or a float with one or two decimals in [lo, hi]."""
    roll = rng.random()
    if roll < 0.4:
        return rng.randint(int(lo), int(hi))
    if roll < 0.7:
        return min(hi, rng.randint(int(lo), int(hi)) + 0.5)
    return round(rng.uniform(lo, hi), rng.choice([1, 2]))


def _word(rng: random.Random, n_min: int = 1, n_max: int = 7, letters: str = "abcdeilnorst") -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(n_min, n_max)))


def _text(rng: random.Random, n_max: int = 6, punct: str = "") -> str:
    """Words of mixed case separated by one or more spaces, with some ``punct``."""
    out = []
    for _ in range(rng.randint(0, n_max)):
        w = _word(rng)
        if rng.random() < 0.3:
            w = w.capitalize()
        if punct and rng.random() < 0.3:
            w += rng.choice(punct)
        out.append(w)
    return "".join(w + " " * rng.choice([1, 1, 1, 2]) for w in out).rstrip()


def _sorted_ints(rng: random.Random, strict: bool) -> list[int]:
    xs = sorted(_int_list(rng, 9, -10, 30))
    return sorted(set(xs)) if strict else xs


def _anagram_words(rng: random.Random) -> list[str]:
    """Words of which some are anagrams of each other (groups of 2-3) and some not."""
    words = []
    for _ in range(rng.randint(0, 4)):
        base = _word(rng, 2, 6)
        for _ in range(rng.randint(1, 3)):
            letters = list(base)
            rng.shuffle(letters)
            words.append("".join(letters))
    rng.shuffle(words)
    return words


def _caesar(text: str, k: int) -> str:
    def one(ch: str) -> str:
        for first in ("a", "A"):
            if first <= ch <= chr(ord(first) + 25):
                return chr((ord(ch) - ord(first) + k) % 26 + ord(first))
        return ch

    return "".join(one(ch) for ch in text)


def _crack_args(rng: random.Random) -> tuple:
    words = [_word(rng, 3, 7, string.ascii_lowercase) for _ in range(rng.randint(1, 4))]
    k = rng.randint(0, 25)
    known = rng.choice(words) if rng.random() < 0.8 else _word(rng, 3, 5)
    return (_caesar(" ".join(words), k), known)


def _digits(n: int, base: int) -> str:
    chars = "0123456789abcdefghijklmnopqrstuvwxyz"
    if n == 0:
        return "0"
    out = ""
    m = abs(n)
    while m:
        out = chars[m % base] + out
        m //= base
    return ("-" if n < 0 else "") + out


def _from_base_args(rng: random.Random) -> tuple:
    base = _int(rng, 2, 36, 2, 8, 10, 16, 36)
    text = _digits(_int(rng, -5000, 5000, 0, 1, -1, base, base - 1), base)
    return (text.upper() if rng.random() < 0.3 else text, base)


def _brackets(rng: random.Random) -> str:
    """Balanced bracket text (half the time), or bracket text with one change, with letters."""
    out = ""
    for _ in range(rng.randint(0, 5)):
        o, c = rng.choice(["()", "[]", "{}"])
        out = o + out + c if rng.random() < 0.5 else out + o + c
    if out and rng.random() < 0.5:
        i = rng.randrange(len(out))
        out = out[:i] + rng.choice("()[]{}" + "x") + out[i + 1 :]
    return "".join(ch + (rng.choice("ab ") if rng.random() < 0.2 else "") for ch in out)


def _roman_of(n: int) -> str:
    out = ""
    for value, symbol in (
        (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
        (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
    ):  # fmt: skip
        while n >= value:
            out, n = out + symbol, n - value
    return out


def _hhmm(rng: random.Random) -> str:
    return f"{_int(rng, 0, 23, 0, 23, 12):02d}:{_int(rng, 0, 59, 0, 59, 30):02d}"


def _coins(rng: random.Random) -> list[int]:
    return sorted(set(rng.sample([1, 2, 3, 4, 5, 7, 10, 20, 25, 50], rng.randint(1, 4))))


def _year(rng: random.Random) -> int:
    """A year, often a multiple of 4, 100 or 400 (where calendar bugs live)."""
    return rng.choice(
        [
            rng.randint(1, 3000),
            4 * rng.randint(1, 750),
            100 * rng.randint(1, 30),
            400 * rng.randint(1, 7),
        ]
    )


def _date(rng: random.Random) -> tuple:
    year, month = _year(rng), rng.randint(1, 12)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    return (year, month, _int(rng, 1, days, 1, days))


def _intervals(rng: random.Random, n_max: int = 5) -> list[tuple[int, int]]:
    out = []
    for _ in range(rng.randint(0, n_max)):
        a = rng.randint(-5, 20)
        out.append((a, a + rng.randint(0, 6)))
    return out


def _overlap_pair(rng: random.Random) -> tuple:
    """Two intervals: apart, touching at an end, or overlapping."""
    a0 = rng.randint(-5, 10)
    a = (a0, a0 + rng.randint(0, 4))
    b0 = a[1] + rng.randint(-5, 4)
    b = (b0, b0 + rng.randint(0, 4))
    return (a, b) if rng.random() < 0.5 else (b, a)


def _grid(
    rng: random.Random, cells: Callable[[random.Random], Any], rows: int = 0, cols: int = 0
) -> list:
    rows, cols = rows or rng.randint(1, 4), cols or rng.randint(1, 4)
    return [[cells(rng) for _ in range(cols)] for _ in range(rows)]


def _matmul_args(rng: random.Random) -> tuple:
    n, k, m = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 3)
    cell = lambda r: r.randint(-5, 9)  # noqa: E731
    return (_grid(rng, cell, n, k), _grid(rng, cell, k if rng.random() < 0.9 else k + 1, m))


def _poly(rng: random.Random) -> list[int]:
    p = _int_list(rng, 5, -5, 5)
    return p + [0] * rng.randint(0, 2) if rng.random() < 0.3 else p


def _version(rng: random.Random) -> str:
    parts = [str(_int(rng, 0, 12, 0, 1, 9, 10)) for _ in range(rng.randint(1, 4))]
    return ".".join(parts)


def _version_pair(rng: random.Random) -> tuple:
    a = _version(rng)
    roll = rng.random()
    if roll < 0.3:
        return (a, a + ".0" * rng.randint(1, 2))  # equal with trailing zeros
    if roll < 0.45:
        return (a, a)
    return (a, _version(rng))


def _rle_text(rng: random.Random) -> str:
    return "".join(
        rng.choice("abxyz") * _int(rng, 1, 4, 1, 10, 12) for _ in range(rng.randint(0, 5))
    )


def _rle_code(rng: random.Random) -> str:
    return "".join(
        f"{_int(rng, 1, 4, 1, 10, 12)}{rng.choice('abxyz')}" for _ in range(rng.randint(0, 5))
    )


def _expression(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 6)):
        parts.append(
            rng.choice(
                [
                    str(rng.randint(0, 120)),
                    f"{rng.randint(0, 9)}.{rng.randint(0, 99)}",
                    _word(rng, 1, 3) + rng.choice(["", "1", "2"]),
                    rng.choice("+-*/^()"),
                ]
            )
        )
    return "".join(p + rng.choice(["", "", " "]) for p in parts)


def _window_args(rng: random.Random) -> tuple:
    xs = _int_list(rng, 8, -10, 10)
    return (xs, _int(rng, 1, max(1, len(xs)), 1, len(xs), len(xs) + 1))


def _histogram_args(rng: random.Random) -> tuple:
    lo = rng.randint(-5, 5)
    hi = lo + rng.randint(1, 12)
    values = [_number(rng, lo - 2, hi + 2) for _ in range(rng.randint(0, 8))]
    return (values, lo, hi, rng.randint(1, 6))


FAMILIES: dict[str, Domain] = {
    "anagram": Domain(
        generators={
            "signature": lambda r: (_text(r, 2),),
            "is_anagram": lambda r: tuple(rng_pair(r)),
            "group_anagrams": lambda r: (_anagram_words(r),),
            "count_letters": lambda r: (_text(r, 3, ",.!2"),),
        }
    ),
    "base_convert": Domain(
        predicates={"from_base": _base_digits},
        generators={
            "to_base": lambda r: (_int(r, -5000, 5000, 0, 1, -1), _int(r, 2, 36, 2, 10, 16, 36)),
            "from_base": _from_base_args,
        },
    ),
    "bits": Domain(
        generators={
            "count_bits": lambda r: (_int(r, 0, 5000, 0, 1, 255, 256, 1023),),
            "is_power_of_two": lambda r: (_int(r, 0, 5000, 0, 1, 2, 64, 1024, 1023),),
            "parity": lambda r: (_int(r, 0, 5000, 0, 1, 3, 7),),
            "highest_bit": lambda r: (_int(r, 1, 5000, 1, 2, 256, 255),),
            "to_bits": lambda r: (lambda w: (r.randint(0, 2**w - 1), w))(r.randint(1, 10)),
        }
    ),
    "brackets": Domain(
        generators={
            "balanced": lambda r: (_brackets(r),),
            "max_depth": lambda r: (_brackets(r),),
            "first_unmatched": lambda r: (_brackets(r),),
        }
    ),
    "bsearch": Domain(
        predicates={
            # a repeated value has no one index to find: only lower_bound promises one there
            "binary_search": lambda xs, target: _strict(xs),
            "lower_bound": lambda xs, target: _sorted(xs),
            "count_in_range": lambda xs, low, high: _sorted(xs) and low <= high,
        },
        generators={
            "binary_search": lambda r: (
                lambda xs: (xs, r.choice(xs) if xs and r.random() < 0.6 else r.randint(-12, 32))
            )(_sorted_ints(r, True)),
            "lower_bound": lambda r: (
                lambda xs: (xs, r.choice(xs) if xs and r.random() < 0.5 else r.randint(-12, 32))
            )(_sorted_ints(r, False)),
            "count_in_range": lambda r: (lambda xs, a: (xs, a, a + r.randint(-2, 12)))(
                _sorted_ints(r, False), r.randint(-12, 32)
            ),
        },
    ),
    "caesar": Domain(
        predicates={"shift_char": lambda ch, k: isinstance(ch, str) and len(ch) == 1},
        generators={
            "shift_char": lambda r: (
                r.choice(string.ascii_letters + " .!z"),
                _int(r, -30, 30, 0, 1, 25, 26, -1),
            ),
            "encrypt": lambda r: (_text(r, 4, ".,!"), _int(r, -30, 30, 0, 13, 26, -1)),
            "decrypt": lambda r: (_text(r, 4, ".,!"), _int(r, -30, 30, 0, 13, 26, -1)),
            "crack": _crack_args,
        },
    ),
    "chunks": Domain(
        generators={
            "chunk": lambda r: (_int_list(r, 9), _int(r, 1, 5, 1, 2)),
            "flatten": lambda r: ([_int_list(r, 3) for _ in range(r.randint(0, 4))],),
            "pairwise": lambda r: (_int_list(r, 6),),
            "interleave": lambda r: (_int_list(r, 5), _int_list(r, 5)),
        }
    ),
    "clock": Domain(
        predicates={
            "parse": lambda hhmm: _is_hhmm(hhmm),
            "add_minutes": lambda hhmm, delta: _is_hhmm(hhmm),
            "minutes_between": lambda a, b: _is_hhmm(a) and _is_hhmm(b),
        },
        generators={
            "parse": lambda r: (_hhmm(r),),
            "fmt": lambda r: (_int(r, -3000, 5000, 0, 1439, 1440, -1),),
            "add_minutes": lambda r: (_hhmm(r), _int(r, -3000, 3000, 0, 1440, -1)),
            "minutes_between": lambda r: (lambda a: (a, a if r.random() < 0.2 else _hhmm(r)))(
                _hhmm(r)
            ),
        },
    ),
    "coins": Domain(
        generators={
            "min_coins": lambda r: (_int(r, 0, 60, 0, 1), _coins(r)),
            "greedy_change": lambda r: (_int(r, 0, 120, 0, 1), _coins(r)),
            "ways": lambda r: (_int(r, 0, 40, 0, 1), _coins(r)),
        }
    ),
    "dates": Domain(
        generators={
            "is_leap": lambda r: (_year(r),),
            "days_in_month": lambda r: (_year(r), _int(r, 1, 12, 2, 0, 13)),
            "day_of_year": _date,
            "days_in_year": lambda r: (_year(r),),
        }
    ),
    "fibonacci": Domain(
        generators={
            "fib": lambda r: (_int(r, 0, 60, 0, 1, 2),),
            "fib_list": lambda r: (_int(r, 0, 25, 0, 1, 2),),
            "is_fib": lambda r: (_int(r, 0, 2000, 0, 1, 2, 3, 4, 5, 8, 13, 21, 89, 144, 987),),
            "fib_sum": lambda r: (_int(r, 0, 40, 0, 1, 2),),
        }
    ),
    "grades": Domain(
        fractional={"letter": (0,), "average": (0,), "passing": (0, 1)},
        generators={
            "letter": lambda r: (_number(r, 0, 100),),
            "average": lambda r: ([_number(r, 0, 100) for _ in range(r.randint(0, 6))],),
            "passing": lambda r: (
                [_number(r, 0, 100) for _ in range(r.randint(0, 6))],
                _int(r, 0, 100, 60, 0, 100),
            ),
        },
    ),
    "histogram": Domain(
        fractional={"bin_index": (0, 1, 2), "histogram": (0, 1, 2)},  # not nbins
        predicates={
            "bin_index": lambda x, lo, width, nbins: width > 0 and _count(nbins),
            "histogram": lambda values, lo, hi, nbins: isinstance(nbins, int),
        },
        generators={
            "bin_index": lambda r: (
                _number(r, -5, 15),
                r.randint(-3, 3),
                r.choice([1, 2, 0.5, 2.5]),
                r.randint(1, 6),
            ),
            "histogram": _histogram_args,
            "render": lambda r: (
                [r.randint(0, 5) for _ in range(r.randint(0, 5))],
                r.choice("#*="),
            ),
        },
    ),
    "intervals": Domain(
        predicates={
            "merge": lambda xs: isinstance(xs, list) and all(_interval(x) for x in xs),
            "total_length": lambda xs: isinstance(xs, list) and all(_interval(x) for x in xs),
            "overlaps": lambda a, b: _interval(a) and _interval(b),
            "contains": lambda xs, x: isinstance(xs, list) and all(_interval(i) for i in xs),
        },
        generators={
            "merge": lambda r: (_intervals(r),),
            "total_length": lambda r: (_intervals(r),),
            "overlaps": _overlap_pair,
            "contains": lambda r: (_intervals(r), r.randint(-6, 28)),
        },
    ),
    "life": Domain(
        predicates={
            "neighbors": lambda g, r, c: _cells01(g) and 0 <= r < len(g) and 0 <= c < len(g[0]),
            "step": lambda g: _cells01(g),
            "population": lambda g: _cells01(g),
        },
        generators={
            "neighbors": lambda r: (lambda g: (g, r.randrange(len(g)), r.randrange(len(g[0]))))(
                _grid(r, lambda q: q.randint(0, 1))
            ),
            "step": lambda r: (_grid(r, lambda q: q.randint(0, 1)),),
            "population": lambda r: (_grid(r, lambda q: q.randint(0, 1)),),
        },
    ),
    "matrix": Domain(
        predicates={
            "transpose": lambda m: _grid_of_numbers(m),
            "matmul": lambda a, b: _grid_of_numbers(a) and _grid_of_numbers(b),
            "trace": lambda m: _grid_of_numbers(m) and len(m) == len(m[0]),
            "scale": lambda m, k: _grid_of_numbers(m),
        },
        generators={
            "identity": lambda r: (r.randint(1, 5),),
            "transpose": lambda r: (_grid(r, lambda q: q.randint(-5, 9)),),
            "matmul": _matmul_args,
            "trace": lambda r: (lambda n: (_grid(r, lambda q: q.randint(-5, 9), n, n),))(
                r.randint(1, 4)
            ),
            "scale": lambda r: (
                _grid(r, lambda q: q.randint(-5, 9)),
                r.choice([0, 1, 2, -1, 3, 0.5]),
            ),
        },
    ),
    "number_theory": Domain(
        generators={
            "gcd": lambda r: (_int(r, -60, 60, 0, 1, 12, 18), _int(r, -60, 60, 0, 1, 12, 18)),
            "lcm": lambda r: (_int(r, -30, 30, 0, 1, 4, 6), _int(r, -30, 30, 0, 1, 4, 6)),
            "coprime": lambda r: (_int(r, 1, 60, 1, 2, 12), _int(r, 1, 60, 1, 2, 12)),
            "divisors": lambda r: (_int(r, 1, 300, 1, 2, 16, 36, 97),),
        }
    ),
    "polynomial": Domain(
        generators={
            "evaluate": lambda r: (_poly(r), _int(r, -4, 4, 0, 1, -1)),
            "add": lambda r: (lambda p: (p, [-c for c in p] if r.random() < 0.2 else _poly(r)))(
                _poly(r)
            ),
            "derivative": lambda r: (_poly(r),),
            "trim": lambda r: (_poly(r),),
            "degree": lambda r: (_poly(r),),
        }
    ),
    "primes": Domain(
        generators={
            "is_prime": lambda r: (_int(r, -10, 400, 0, 1, 2, 3, 4, 9, 25, 49, 97, 121),),
            "primes_up_to": lambda r: (_int(r, -10, 200, 0, 1, 2, 3, -1),),
            "next_prime": lambda r: (_int(r, -10, 300, 0, 1, 2, 3, 13, -1),),
        }
    ),
    "rle": Domain(
        predicates={
            "decode": lambda code: (
                isinstance(code, str) and re.fullmatch(r"([1-9]\d*\D)*", code) is not None
            )
        },
        generators={"encode": lambda r: (_rle_text(r),), "decode": lambda r: (_rle_code(r),)},
    ),
    "roman": Domain(
        predicates={"from_roman": _roman},
        generators={
            "to_roman": lambda r: (_int(r, 1, 3999, 1, 4, 9, 14, 40, 90, 400, 900, 3999, 0, 4000),),
            "from_roman": lambda r: (
                _roman_of(_int(r, 1, 3999, 1, 4, 9, 14, 40, 90, 400, 900, 3999)),
            ),
        },
    ),
    "stats": Domain(
        fractional={n: (0, 1, 2) for n in ("mean", "median", "variance", "value_range", "clamp")},
        predicates={"clamp": lambda x, lo, hi: lo <= hi},
        generators={
            "mean": lambda r: ([_number(r, -20, 20) for _ in range(r.randint(1, 7))],),
            "median": lambda r: ([_number(r, -20, 20) for _ in range(r.randint(1, 7))],),
            "variance": lambda r: ([_number(r, -20, 20) for _ in range(r.randint(1, 7))],),
            "value_range": lambda r: ([_number(r, -20, 20) for _ in range(r.randint(1, 7))],),
            "clamp": lambda r: (lambda lo: (_number(r, -20, 20), lo, lo + r.randint(0, 10)))(
                r.randint(-10, 10)
            ),
        },
    ),
    "strings": Domain(
        generators={
            "is_palindrome": lambda r: (
                lambda w: (w + (w[::-1] if r.random() < 0.6 else _word(r)),)
            )(_text(r, 2, ",!")),
            "reverse_words": lambda r: (_text(r, 5),),
            "count_vowels": lambda r: (_text(r, 4, "!"),),
            "capitalize_words": lambda r: (_text(r, 5),),
            "common_prefix": lambda r: (lambda w: (w + _word(r, 0, 3), w + _word(r, 0, 3)))(
                _word(r, 0, 5)
            ),
        }
    ),
    "temperature": Domain(
        fractional={n: (0,) for n in ("c_to_f", "f_to_c", "c_to_k", "classify")},
        generators={
            "c_to_f": lambda r: (_number(r, -60, 120),),
            "f_to_c": lambda r: (_number(r, -80, 250),),
            "c_to_k": lambda r: (r.choice([_number(r, -273, 100), -273.15, -274]),),
            "classify": lambda r: (_number(r, -10, 40),),
        },
    ),
    "tokenizer": Domain(generators={"tokenize": lambda r: (_expression(r),)}),
    "versions": Domain(
        predicates={
            "parse_version": lambda t: _is_version(t),
            "compare": lambda a, b: _is_version(a) and _is_version(b),
            "latest": lambda vs: (
                isinstance(vs, list) and len(vs) > 0 and all(_is_version(x) for x in vs)
            ),
            "bump": lambda v, part: _is_version(v) and 0 <= part < len(v.split(".")),
        },
        generators={
            "parse_version": lambda r: (_version(r),),
            "compare": _version_pair,
            "latest": lambda r: (
                [_version(r) for _ in range(r.randint(1, 4))]
                + list(_version_pair(r))[: r.randint(0, 2)],
            ),
            "bump": lambda r: (lambda v: (v, r.randrange(len(v.split(".")))))(_version(r)),
        },
    ),
    "windows": Domain(
        generators={
            "window_sums": _window_args,
            "max_window_sum": lambda r: (lambda xs: (xs, r.randint(1, len(xs))))(
                _int_list(r, 8, -10, 10, 1)
            ),
            "moving_average": _window_args,
        }
    ),
    "wordcount": Domain(
        generators={
            "words": lambda r: (_text(r, 6, ",.!-2"),),
            "word_counts": lambda r: (_text(r, 8, ",.!"),),
            "top_words": lambda r: (_text(r, 8, ",."), r.randint(0, 5)),
            "longest_word": lambda r: (_text(r, 6, ",."),),
        }
    ),
    "wrap": Domain(
        generators={
            "wrap": lambda r: (_text(r, 8), _int(r, 1, 16, 1, 3, 5)),
            "center": lambda r: (_word(r, 0, 6), r.randint(0, 10)),
        }
    ),
}


def rng_pair(rng: random.Random) -> list[str]:
    """Two words: anagrams of each other (mixed case, maybe equal), or not."""
    a = _word(rng, 1, 6)
    roll = rng.random()
    if roll < 0.5:
        letters = list(a)
        rng.shuffle(letters)
        b = "".join(letters)
        return [a, b.upper() if rng.random() < 0.3 else b]
    if roll < 0.6:
        return [a, a.capitalize()]
    return [a, _word(rng, 1, 6)]


def _count(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _strict(xs: Any) -> bool:
    return _numbers(xs) and all(a < b for a, b in zip(xs, xs[1:]))


def _is_hhmm(x: Any) -> bool:
    return isinstance(x, str) and _HHMM.fullmatch(x) is not None


def _is_version(x: Any) -> bool:
    return isinstance(x, str) and _VERSION.fullmatch(x) is not None


def _cells01(g: Any) -> bool:
    return _grid_check(g, lambda v: v in (0, 1) and not isinstance(v, bool))


def _grid_of_numbers(m: Any) -> bool:
    return _grid_check(m, lambda v: isinstance(v, int | float) and not isinstance(v, bool))


@cache
def _corpus_source(module: str) -> str | None:
    path = CORPUS_DIR / f"{module}.py"
    return path.read_text() if path.is_file() else None


def for_task(payload: Mapping[str, Any]) -> Domain:
    """The domain of a task's family, when its gold module is the corpus module."""
    module = payload.get("module")
    if not isinstance(module, str) or module not in FAMILIES:
        return Domain()
    gold = payload.get("gold_patch", {}).get(f"{module}.py")
    if gold is None or gold != _corpus_source(module):
        return Domain()
    return FAMILIES[module]
