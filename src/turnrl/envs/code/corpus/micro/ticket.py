def ticket(age):
    if age < 12 or age >= 65:
        return 5
    return 10
