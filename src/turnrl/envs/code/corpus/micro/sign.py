def sign(n):
    return (n > 0) - (n < 0)
