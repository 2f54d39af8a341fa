def tax(income):
    if income <= 1000:
        return 0
    return 50 + (income - 1000) * 20 // 100
