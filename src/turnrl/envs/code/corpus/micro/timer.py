def timer(seconds):
    return seconds // 60, seconds % 60
