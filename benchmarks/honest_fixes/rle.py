"""Honest fixes of rle.py: itertools.groupby, a regular expression, leniency."""

import re
from itertools import groupby


def encode__algorithm(text):
    return "".join(f"{len(list(run))}{ch}" for ch, run in groupby(text))


def decode__algorithm(code):
    return "".join(ch * int(n) for n, ch in re.findall(r"(\d+)(\D)", code))


def decode__lenient(code):
    """A letter with no count stands for one (outside the documented domain)."""
    out, digits = [], ""
    for ch in code:
        if ch.isdigit():
            digits += ch
            continue
        out.append(ch * int(digits or "1"))
        digits = ""
    return "".join(out)
