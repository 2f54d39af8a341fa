"""Honest fixes of coins.py: memoised recursion, other loops, None for -1 is not allowed."""

from functools import cache


def min_coins__algorithm(amount, coins):
    if amount < 0:
        raise ValueError("negative amount")

    @cache
    def best(a):
        if a == 0:
            return 0
        options = [best(a - c) for c in coins if 0 < c <= a]
        options = [o for o in options if o >= 0]
        return 1 + min(options) if options else -1

    for a in range(amount):  # fill the cache bottom-up: no deep recursion
        best(a)
    return best(amount)


def greedy_change__flow(amount, coins):
    out = []
    for c in sorted(coins)[::-1]:
        n, amount = divmod(amount, c)
        out += [c] * n
    return out if amount == 0 else None


def ways__algorithm(amount, coins):
    @cache
    def count(a, i):
        if a == 0:
            return 1
        if i == len(coins):
            return 0
        c = coins[i]
        return count(a, i + 1) + (count(a - c, i) if c <= a else 0)

    return count(amount, 0)
