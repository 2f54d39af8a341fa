"""Honest fixes of windows.py: slices, a deque, statistics."""

from collections import deque


def window_sums__algorithm(xs, k):
    if not 1 <= k <= len(xs):
        return []
    return [sum(xs[i : i + k]) for i in range(len(xs) - k + 1)]


def window_sums__flow(xs, k):
    if k < 1 or k > len(xs):
        return []
    window, out = deque(), []
    for x in xs:
        window.append(x)
        if len(window) > k:
            window.popleft()
        if len(window) == k:
            out.append(sum(window))
    return out


def max_window_sum__flow(xs, k):
    sums = window_sums(xs, k)
    if sums:
        return max(sums)
    raise ValueError("window larger than data")


def moving_average__algorithm(xs, k):
    return [sum(xs[i : i + k]) / k for i in range(len(xs) - k + 1)] if 1 <= k <= len(xs) else []
