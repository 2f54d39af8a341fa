"""Honest fixes of minheap.py: the heapq module, a sorted list."""

import bisect
import heapq


class MinHeap__algorithm:
    def __init__(self):
        self.a = []

    def __len__(self):
        return len(self.a)

    def push(self, x):
        heapq.heappush(self.a, x)

    def pop(self):
        if not self.a:
            raise IndexError("pop from empty heap")
        return heapq.heappop(self.a)

    def peek(self):
        return self.a[0] if self.a else None


class MinHeap__flow:
    """A list kept sorted, smallest last (so pop is cheap)."""

    def __init__(self):
        self._items = []

    def __len__(self):
        return len(self._items)

    def push(self, x):
        keys = [-v for v in self._items]
        self._items.insert(bisect.bisect_right(keys, -x), x)

    def pop(self):
        if not self._items:
            raise IndexError("pop from empty heap")
        return self._items.pop()

    def peek(self):
        return self._items[-1] if self._items else None
