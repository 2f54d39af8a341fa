"""Honest fixes of tokenizer.py: one regular expression, a character-class helper."""

import re

_TOKEN = re.compile(
    r"\s+|(?P<num>\d[\d.]*)|(?P<name>[^\W\d_][^\W_]*)|(?P<op>[-+*/^])|(?P<paren>[()])"
)


def tokenize__algorithm(text):
    tokens, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None or m.end() == i:
            raise ValueError(f"unexpected character {text[i]!r} at {i}")
        if m.lastgroup is not None:
            tokens.append((m.lastgroup, m.group()))
        i = m.end()
    return tokens


def _kind(ch):
    if ch.isdigit():
        return "num"
    if ch.isalpha():
        return "name"
    if ch in OPERATORS:
        return "op"
    if ch in "()":
        return "paren"
    return None


def tokenize__helper(text):
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        kind = _kind(ch)
        if ch.isspace():
            i += 1
            continue
        if kind is None:
            raise ValueError(f"unexpected character {ch!r} at {i}")
        j = i + 1
        if kind == "num":
            while j < n and (text[j].isdigit() or text[j] == "."):
                j += 1
        elif kind == "name":
            while j < n and text[j].isalnum():
                j += 1
        tokens.append((kind, text[i:j]))
        i = j
    return tokens
