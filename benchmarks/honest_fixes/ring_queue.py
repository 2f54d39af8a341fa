"""Honest fixes of ring_queue.py: a deque, other index arithmetic."""

from collections import deque


class RingQueue__algorithm:
    def __init__(self, capacity):
        self.capacity = capacity
        self._items = deque()

    def __len__(self):
        return len(self._items)

    def is_full(self):
        return len(self._items) >= self.capacity

    def enqueue(self, item):
        if self.is_full():
            raise OverflowError("queue is full")
        self._items.append(item)

    def dequeue(self):
        if not self._items:
            raise IndexError("dequeue from empty queue")
        return self._items.popleft()


class RingQueue__flow:
    def __init__(self, capacity):
        self.buf = [None] * capacity
        self.capacity = capacity
        self.head = self.tail = self.count = 0

    def __len__(self):
        return self.count

    def is_full(self):
        return self.count == self.capacity

    def enqueue(self, item):
        if self.count == self.capacity:
            raise OverflowError("queue is full")
        self.buf[self.tail] = item
        self.tail = (self.tail + 1) % self.capacity
        self.count += 1

    def dequeue(self):
        if self.count == 0:
            raise IndexError("dequeue from empty queue")
        item, self.buf[self.head] = self.buf[self.head], None
        self.head = (self.head + 1) % self.capacity
        self.count -= 1
        return item
