def majority(a, b, c):
    return a and b or b and c or a and c
