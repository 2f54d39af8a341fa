def wages(hours, rate):
    if hours <= 40:
        return hours * rate
    extra = hours - 40
    return 40 * rate + extra * rate * 3 // 2
