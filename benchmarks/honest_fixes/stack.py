"""Honest fixes of stack.py: a deque, other checks."""

from collections import deque


class Stack__algorithm:
    def __init__(self, limit=10):
        self.items = deque()
        self.limit = limit

    def push(self, item):
        if self.size() == self.limit:
            raise OverflowError("stack is full")
        self.items.append(item)

    def pop(self):
        try:
            return self.items.pop()
        except IndexError:
            raise IndexError("pop from empty stack") from None

    def peek(self):
        return self.items[-1] if self.items else None

    def size(self):
        return len(self.items)

    def is_empty(self):
        return not self.items
