def fine(speed, limit):
    over = speed - limit
    if over <= 0:
        return 0
    return 100 if over > 20 else 50
