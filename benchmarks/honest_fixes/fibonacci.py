"""Honest fixes of fibonacci.py: memoisation, a generator, a closed test for membership."""

import math
from functools import cache
from itertools import islice


def fib__algorithm(n):
    if n < 0:
        raise ValueError("n must be non-negative")

    @cache
    def f(k):
        return k if k < 2 else f(k - 1) + f(k - 2)

    for k in range(n):  # warm the cache from below: no deep recursion
        f(k)
    return f(n)


def _fibs():
    a, b = 0, 1
    while True:
        yield a
        a, b = b, a + b


def fib_list__helper(n):
    return list(islice(_fibs(), max(n, 0)))


def is_fib__algorithm(x):
    """x is a Fibonacci number iff 5x^2 + 4 or 5x^2 - 4 is a perfect square."""
    if x < 0:
        return False

    def square(m):
        return m >= 0 and math.isqrt(m) ** 2 == m

    return square(5 * x * x + 4) or square(5 * x * x - 4)


def fib_sum__algorithm(n):
    return fib(n + 1) - 1 if n > 0 else 0
