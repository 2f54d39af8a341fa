def cartons(eggs):
    full = eggs // 12
    if eggs % 12 == 0:
        return full
    return full + 1
