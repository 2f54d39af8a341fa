def hamming(a, b):
    count = 0
    for x, y in zip(a, b):
        count += x != y
    return count
