def surface(length, width, height):
    return 2 * (length * width + width * height + length * height)
