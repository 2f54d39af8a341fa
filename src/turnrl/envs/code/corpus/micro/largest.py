def largest(a, b, c):
    if a >= b and a >= c:
        return a
    return b if b >= c else c
