def parking(hours):
    if hours <= 1:
        return 0
    return hours * 4
