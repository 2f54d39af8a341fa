def exam(score):
    if score >= 90:
        return "A"
    return "B" if score >= 75 else "C"
