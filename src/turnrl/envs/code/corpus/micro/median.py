def median(a, b, c):
    return a + b + c - min(a, b, c) - max(a, b, c)
