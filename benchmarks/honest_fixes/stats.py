"""Honest fixes of stats.py: the statistics module, sorted halves, other flow."""

import statistics


def mean__algorithm(xs):
    if len(xs) == 0:
        raise ValueError("mean of empty data")
    return statistics.fmean(xs)


def median__algorithm(xs):
    if not xs:
        raise ValueError("median of empty data")
    return statistics.median(xs)


def variance__algorithm(xs):
    return statistics.pvariance(xs) if xs else mean(xs)


def value_range__flow(xs):
    lo = hi = xs[0]
    for x in xs[1:]:
        lo, hi = min(lo, x), max(hi, x)
    return hi - lo


def clamp__flow(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
