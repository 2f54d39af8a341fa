"""Honest fixes of base_convert.py: recursion, int() for parsing, lenient input."""


def to_base__algorithm(n, base):
    if not 2 <= base <= 36:
        raise ValueError("base must be 2..36")
    if n < 0:
        return "-" + to_base(-n, base)
    if n < base:
        return DIGITS[n]
    return to_base(n // base, base) + DIGITS[n % base]


def from_base__algorithm(text, base):
    for ch in text.strip().lower().lstrip("-"):
        if DIGITS.index(ch) >= base:
            raise ValueError(f"digit {ch} not valid in base {base}")
    return int(text.strip(), base)


def from_base__lenient(text, base):
    """Also accepts underscores between digits (outside the documented domain)."""
    text = text.strip().lower().replace("_", "")
    sign = -1 if text[:1] == "-" else 1
    value = 0
    for ch in text.lstrip("-"):
        d = DIGITS.index(ch)
        if d >= base:
            raise ValueError(f"digit {ch} not valid in base {base}")
        value = value * base + d
    return sign * value
