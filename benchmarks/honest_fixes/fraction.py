"""Honest fixes of fraction.py: other normalisation, comparisons through a helper."""

import math


class Frac__algorithm:
    def __init__(self, num, den=1):
        if den == 0:
            raise ZeroDivisionError("zero denominator")
        sign = -1 if (num < 0) != (den < 0) and num != 0 else 1
        num, den = abs(num), abs(den)
        g = math.gcd(num, den) or 1
        self.num, self.den = sign * (num // g), den // g

    def _cross(self, other):
        return self.num * other.den, other.num * self.den

    def __add__(self, other):
        return Frac(sum(self._cross(other)), self.den * other.den)

    def __sub__(self, other):
        a, b = self._cross(other)
        return Frac(a - b, self.den * other.den)

    def __mul__(self, other):
        return Frac(self.num * other.num, self.den * other.den)

    def __eq__(self, other):
        a, b = self._cross(other)
        return a == b

    def __lt__(self, other):
        a, b = self._cross(other)
        return a < b

    def __repr__(self):
        return "%d/%d" % (self.num, self.den)
