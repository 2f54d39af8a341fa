"""Honest fixes of life.py: sums over slices, a set of live cells, comprehensions."""


def neighbors__algorithm(grid, r, c):
    rows = grid[max(r - 1, 0) : r + 2]
    total = sum(sum(row[max(c - 1, 0) : c + 2]) for row in rows)
    return total - grid[r][c]


def step__algorithm(grid):
    h, w = len(grid), len(grid[0])
    live = {(r, c) for r in range(h) for c in range(w) if grid[r][c]}

    def count(r, c):
        return sum((r + dr, c + dc) in live for dr in (-1, 0, 1) for dc in (-1, 0, 1)) - (
            (r, c) in live
        )

    return [
        [int(count(r, c) == 3 or ((r, c) in live and count(r, c) == 2)) for c in range(w)]
        for r in range(h)
    ]


def population__algorithm(grid):
    return sum(map(sum, grid))
