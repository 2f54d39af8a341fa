def between(x, low, high):
    return low <= x and x <= high
