def perimeter(width, height):
    return 2 * width + 2 * height
