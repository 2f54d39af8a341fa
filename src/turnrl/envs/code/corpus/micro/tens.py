def tens(n):
    return n // 10 % 10
