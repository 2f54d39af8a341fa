def winner(a, b):
    if a == b:
        return 0
    return 1 if (a - b) % 3 == 1 else -1
