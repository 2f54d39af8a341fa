"""Honest fixes of lru.py: a plain dict kept in use order, other flow."""

from collections import OrderedDict


class LRUCache__algorithm:
    """A dict's insertion order as the use order: a used key is popped and put back."""

    def __init__(self, capacity):
        if not capacity >= 1:
            raise ValueError("capacity must be positive")
        self.capacity, self.data, self.hits, self.misses = capacity, {}, 0, 0

    def get(self, key, default=None):
        if key in self.data:
            self.hits += 1
            self.data[key] = self.data.pop(key)
            return self.data[key]
        self.misses += 1
        return default

    def put(self, key, value):
        self.data.pop(key, None)
        self.data[key] = value
        while len(self.data) > self.capacity:
            del self.data[next(iter(self.data))]

    def __len__(self):
        return len(self.data)


class LRUCache__flow:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.data = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key, default=None):
        try:
            value = self.data[key]
        except KeyError:
            self.misses += 1
            return default
        self.hits += 1
        self.data.move_to_end(key)
        return value

    def put(self, key, value):
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.capacity:
            self.data.popitem(last=False)

    def __len__(self):
        return len(self.data)
