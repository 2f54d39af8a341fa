def shipping(total):
    if total >= 50:
        return 0
    return 5
