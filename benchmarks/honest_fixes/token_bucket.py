"""Honest fixes of token_bucket.py: other arithmetic, a helper for the refill."""


class TokenBucket__flow:
    def __init__(self, rate, capacity):
        if not (rate > 0 and capacity >= 1):
            raise ValueError("rate and capacity must be positive")
        self.rate, self.capacity = rate, capacity
        self.tokens, self.last = capacity, 0.0

    def refill(self, now):
        if now <= self.last:
            return
        self.tokens = min(self.tokens + (now - self.last) * self.rate, self.capacity)
        self.last = now

    def allow(self, now, cost=1):
        self.refill(now)
        ok = self.tokens >= cost
        if ok:
            self.tokens -= cost
        return ok
