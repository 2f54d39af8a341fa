def change(price, paid):
    diff = paid - price
    if diff < 0:
        return -1
    return diff
