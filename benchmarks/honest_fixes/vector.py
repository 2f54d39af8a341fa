"""Honest fixes of vector.py: math.hypot, tuples inside, other flow."""

import math


class Vec2__algorithm:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def _pair(self):
        return self.x, self.y

    def __add__(self, other):
        return Vec2(*(a + b for a, b in zip(self._pair(), other._pair())))

    def __sub__(self, other):
        return Vec2(*(a - b for a, b in zip(self._pair(), other._pair())))

    def scale(self, k):
        return Vec2(self.x * k, self.y * k)

    def dot(self, other):
        return sum(a * b for a, b in zip(self._pair(), other._pair()))

    def cross(self, other):
        return self.x * other.y - self.y * other.x

    def length(self):
        return math.hypot(self.x, self.y)

    def __eq__(self, other):
        return self._pair() == (other.x, other.y)
