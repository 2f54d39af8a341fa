"""Honest fixes of polynomial.py: zip_longest, enumerate, sum of powers."""

from itertools import zip_longest


def evaluate__algorithm(coeffs, x):
    return sum(c * x**i for i, c in enumerate(coeffs))


def add__algorithm(p, q):
    return trim([a + b for a, b in zip_longest(p, q, fillvalue=0)])


def derivative__flow(p):
    out = []
    for i, c in enumerate(p):
        if i:
            out.append(i * c)
    return trim(out)


def trim__flow(p):
    end = len(p)
    while end and p[end - 1] == 0:
        end -= 1
    return list(p[:end])


def degree__flow(p):
    nonzero = [i for i, c in enumerate(p) if c != 0]
    return nonzero[-1] if nonzero else -1
