"""Honest fixes of roman.py: divmod over the table, a regular-expression decoder."""

import re

_ROMAN = re.compile(r"M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")


def to_roman__algorithm(n):
    if not 0 < n < 4000:
        raise ValueError("out of range")
    parts = []
    for value, symbol in NUMERALS:
        count, n = divmod(n, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman__algorithm(s):
    """Checks the numeral is well formed, then reads the pairs left to right."""
    if not s or _ROMAN.fullmatch(s) is None:
        raise ValueError(f"not a roman numeral: {s!r}")
    pairs = {symbol: value for value, symbol in NUMERALS}
    total, i = 0, 0
    while i < len(s):
        if s[i : i + 2] in pairs:
            total += pairs[s[i : i + 2]]
            i += 2
        else:
            total += pairs[s[i]]
            i += 1
    return total


def from_roman__flow(s):
    total, prev = 0, 0
    for ch in reversed(s):
        value = VALUES[ch]
        total += -value if value < prev else value
        prev = max(prev, value)
    return total
