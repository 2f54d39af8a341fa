"""Honest fixes of primes.py: 6k +- 1 trial division, a sieve of bytes, other loops."""

import math


def is_prime__algorithm(n):
    if n < 4:
        return n >= 2
    if n % 2 == 0 or n % 3 == 0:
        return False
    for d in range(5, math.isqrt(n) + 1, 6):
        if n % d == 0 or n % (d + 2) == 0:
            return False
    return True


def primes_up_to__algorithm(n):
    if n < 2:
        return []
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, n + 1, i)))
    return [i for i in range(n + 1) if sieve[i]]


def next_prime__flow(n):
    candidate = max(n + 1, 2)
    while not is_prime(candidate):
        candidate += 1
    return candidate
