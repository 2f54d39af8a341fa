def clamp(x):
    if x <= 0:
        return 0
    return x if x < 100 else 100
