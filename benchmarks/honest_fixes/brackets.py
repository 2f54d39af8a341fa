"""Honest fixes of brackets.py: a dict of openers, one scan for both answers."""

OPENERS = {"(": ")", "[": "]", "{": "}"}


def balanced__algorithm(text):
    expected = []
    for ch in text:
        if ch in OPENERS:
            expected.append(OPENERS[ch])
        elif ch in OPENERS.values():
            if not expected or expected.pop() != ch:
                return False
    return not expected


def max_depth__flow(text):
    depth, best = 0, 0
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        if depth > best:
            best = depth
    return best


def first_unmatched__helper(text):
    open_positions = _scan(text)
    if isinstance(open_positions, int):
        return open_positions
    return open_positions[0] if open_positions else -1


def _scan(text):
    """The index of the first unmatched closer, or the list of unmatched openers."""
    stack = []
    for i, ch in enumerate(text):
        if ch in "([{":
            stack.append(i)
        elif ch in ")]}":
            if not stack:
                return i
            del stack[-1]
    return stack
