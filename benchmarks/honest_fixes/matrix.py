"""Honest fixes of matrix.py: zip, comprehensions, sums of products."""


def identity__flow(n):
    out = [[0] * n for _ in range(n)]
    for i in range(n):
        out[i][i] = 1
    return out


def transpose__algorithm(m):
    return [list(col) for col in zip(*m)]


def matmul__algorithm(a, b):
    if len(a[0]) != len(b):
        raise ValueError("shape mismatch")
    cols = list(zip(*b))
    return [[sum(x * y for x, y in zip(row, col)) for col in cols] for row in a]


def trace__flow(m):
    total = 0
    for i, row in enumerate(m):
        total += row[i]
    return total


def scale__flow(m, factor):
    return [list(map(lambda x: x * factor, row)) for row in m]
