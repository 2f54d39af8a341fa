def distance(x1, y1, x2, y2):
    return abs(x1 - x2) + abs(y1 - y2)
