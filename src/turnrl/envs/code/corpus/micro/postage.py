def postage(grams):
    if grams <= 20:
        return 1
    return 2 + grams // 100
