"""Honest fixes of chunks.py: itertools, zip, other loops."""

import itertools


def chunk__algorithm(xs, size):
    if size < 1:
        raise ValueError("size must be positive")
    it = iter(xs)
    out = []
    while piece := list(itertools.islice(it, size)):
        out.append(piece)
    return out


def flatten__algorithm(nested):
    return list(itertools.chain.from_iterable(nested))


def pairwise__algorithm(xs):
    return list(zip(xs, xs[1:]))


def interleave__algorithm(a, b):
    marker = object()
    pairs = itertools.zip_longest(a, b, fillvalue=marker)
    return [x for pair in pairs for x in pair if x is not marker]
