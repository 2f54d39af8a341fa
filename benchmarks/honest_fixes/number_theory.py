"""Honest fixes of number_theory.py: the math module, recursion, other loops."""

import math


def gcd__algorithm(a, b):
    return math.gcd(a, b)


def gcd__flow(a, b):
    a, b = abs(a), abs(b)
    return a if b == 0 else gcd(b, a % b)


def lcm__algorithm(a, b):
    return abs(math.lcm(a, b))


def coprime__algorithm(a, b):
    return math.gcd(a, b) == 1


def divisors__algorithm(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def divisors__helper(n):
    root = math.isqrt(n) if n > 0 else 0
    small = [d for d in range(1, root + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]
