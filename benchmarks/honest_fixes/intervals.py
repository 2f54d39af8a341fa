"""Honest fixes of intervals.py: named tuples, any(), a stack of merged spans."""

from typing import NamedTuple


class Span(NamedTuple):
    start: int
    end: int


def merge__type(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1].end:
            last = merged.pop()
            merged.append(Span(last.start, max(last.end, end)))
        else:
            merged.append(Span(start, end))
    return merged


def total_length__flow(intervals):
    total = 0
    for start, end in merge(intervals):
        total += end - start
    return total


def overlaps__algorithm(a, b):
    return max(a[0], b[0]) <= min(a[1], b[1])


def contains__algorithm(intervals, x):
    return any(start <= x <= end for start, end in intervals)
