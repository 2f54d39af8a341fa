def blackjack(a, b):
    total = a + b
    return total if total <= 21 else 0
