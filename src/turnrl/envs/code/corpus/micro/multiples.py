def multiples(n):
    total = 0
    for i in range(n):
        total += i if i % 3 == 0 or i % 5 == 0 else 0
    return total
