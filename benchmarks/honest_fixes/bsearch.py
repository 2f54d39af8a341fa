"""Honest fixes of bsearch.py: the bisect module, a recursive search."""

import bisect


def binary_search__algorithm(xs, target):
    i = bisect.bisect_left(xs, target)
    return i if i < len(xs) and xs[i] == target else -1


def binary_search__flow(xs, target):
    def go(lo, hi):
        if lo > hi:
            return -1
        mid = (lo + hi) // 2
        if xs[mid] == target:
            return mid
        return go(mid + 1, hi) if xs[mid] < target else go(lo, mid - 1)

    return go(0, len(xs) - 1)


def lower_bound__algorithm(xs, target):
    return bisect.bisect_left(xs, target)


def count_in_range__algorithm(xs, low, high):
    return max(0, bisect.bisect_right(xs, high) - bisect.bisect_left(xs, low))
