"""Honest fixes of bank.py: a ledger-derived balance, other control flow."""


class Account__algorithm:
    """The balance kept as the opening amount plus the signed history."""

    def __init__(self, owner, balance=0):
        self.owner = owner
        self._opening = balance
        self.history = []

    @property
    def balance(self):
        signed = {"deposit": 1, "withdraw": -1}
        return self._opening + sum(signed[kind] * amount for kind, amount in self.history)

    def deposit(self, amount):
        self._check(amount, "deposit must be positive")
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        self._check(amount, "withdrawal must be positive")
        if self.balance < amount:
            raise InsufficientFunds(self.owner)
        self.history.append(("withdraw", amount))

    def transfer(self, other, amount):
        self.withdraw(amount)
        other.deposit(amount)

    @staticmethod
    def _check(amount, message):
        if not amount > 0:
            raise ValueError(message)


class Account__flow:
    def __init__(self, owner, balance=0):
        self.owner, self.balance, self.history = owner, balance, []

    def _apply(self, kind, amount):
        if amount <= 0:
            raise ValueError(f"{kind} must be positive")
        if kind == "withdraw" and amount > self.balance:
            raise InsufficientFunds(self.owner)
        self.balance += amount if kind == "deposit" else -amount
        self.history.append((kind, amount))

    def deposit(self, amount):
        self._apply("deposit", amount)

    def withdraw(self, amount):
        self._apply("withdraw", amount)

    def transfer(self, other, amount):
        self.withdraw(amount)
        other.deposit(amount)
