def shape(a, b, c):
    if a == b and b == c:
        return "equilateral"
    return "isosceles" if a == b or b == c or a == c else "scalene"
