def minutes(seconds):
    return (seconds + 30) // 60
