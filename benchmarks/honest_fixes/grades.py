"""Honest fixes of grades.py: a bisect table, statistics, a filter."""

import bisect
import statistics

_CUTS = [60, 70, 80, 90]


def letter__algorithm(score):
    if not 0 <= score <= 100:
        raise ValueError("score must be 0..100")
    return "FDCBA"[bisect.bisect_right(_CUTS, score)]


def average__algorithm(scores):
    return float(statistics.fmean(scores)) if len(scores) else 0.0


def passing__flow(scores, cutoff=60):
    return list(filter(lambda s: not s < cutoff, scores))
