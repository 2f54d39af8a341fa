def phase(temp):
    if temp <= 0:
        return "solid"
    return "liquid" if temp < 100 else "gas"
