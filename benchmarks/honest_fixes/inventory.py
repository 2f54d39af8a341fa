"""Honest fixes of inventory.py: a Counter for the stock, other flow."""

from collections import Counter


class Inventory__type:
    def __init__(self):
        self.stock = Counter()

    def add(self, item, qty=1):
        if qty < 1:
            raise ValueError("quantity must be at least 1")
        self.stock[item] += qty

    def remove(self, item, qty=1):
        if self.stock[item] < qty:
            if self.stock[item] == 0:
                del self.stock[item]
            raise KeyError(item)
        self.stock[item] -= qty
        if not self.stock[item]:
            del self.stock[item]

    def count(self, item):
        return self.stock.get(item, 0)

    def low_stock(self, threshold):
        return sorted(item for item in self.stock if self.stock[item] < threshold)

    def total_items(self):
        return sum(self.stock.values())


class Inventory__flow:
    def __init__(self):
        self.stock = {}

    def add(self, item, qty=1):
        if qty >= 1:
            self.stock[item] = self.count(item) + qty
            return
        raise ValueError("quantity must be at least 1")

    def remove(self, item, qty=1):
        left = self.count(item) - qty
        if left < 0:
            raise KeyError(item)
        if left:
            self.stock[item] = left
        else:
            self.stock.pop(item)

    def count(self, item):
        return self.stock[item] if item in self.stock else 0

    def low_stock(self, threshold):
        low = [item for item, qty in self.stock.items() if qty < threshold]
        low.sort()
        return low

    def total_items(self):
        return sum(qty for qty in self.stock.values())
