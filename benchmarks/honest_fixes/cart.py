"""Honest fixes of cart.py: quantities and prices kept apart, other arithmetic."""


class Cart__algorithm:
    def __init__(self):
        self._qty = {}
        self._price = {}

    def add(self, name, price, qty=1):
        if qty <= 0 or price < 0:
            raise ValueError("bad quantity or price")
        self._price[name] = price  # the latest price holds, as in the reference
        self._qty[name] = self._qty.get(name, 0) + qty

    def subtotal(self):
        return sum(self._price[n] * q for n, q in self._qty.items())

    def item_count(self):
        return sum(self._qty.values())

    def total(self, coupon=0):
        amount = self.subtotal()
        if self.item_count() >= 10:
            amount -= amount - amount * 9 // 10
        return max(0, amount - coupon)


class Cart__flow:
    BULK, PERCENT = 10, 90

    def __init__(self):
        self.lines = {}

    def add(self, name, price, qty=1):
        if not (qty > 0 and price >= 0):
            raise ValueError("bad quantity or price")
        if name in self.lines:
            qty += self.lines[name][1]
        self.lines[name] = (price, qty)

    def subtotal(self):
        total = 0
        for price, qty in self.lines.values():
            total += price * qty
        return total

    def item_count(self):
        return sum(q for _p, q in self.lines.values())

    def total(self, coupon=0):
        amount = self.subtotal()
        bulk = self.item_count() >= self.BULK
        amount = amount * self.PERCENT // 100 if bulk else amount
        return amount - coupon if amount > coupon else 0
