def darts(x, y):
    d = x * x + y * y
    if d <= 1:
        return 10
    return 5 if d <= 25 else 1 if d <= 100 else 0
