"""Honest fixes of temperature.py: other arithmetic, a threshold table."""

import bisect

ABSOLUTE_ZERO_C = -273.15


def c_to_f__algorithm(c):
    return 32 + c * 1.8


def f_to_c__algorithm(f):
    return (f - 32) / 1.8


def c_to_k__flow(c):
    if c >= ABSOLUTE_ZERO_C:
        return c - ABSOLUTE_ZERO_C
    raise ValueError("below absolute zero")


def classify__algorithm(c):
    if c <= 0:
        return "freezing"
    return ("cold", "mild", "hot")[bisect.bisect_right([15, 25], c)]
