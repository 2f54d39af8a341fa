def interest(amount, years):
    for _ in range(years):
        amount += amount * 5 // 100
    return amount
