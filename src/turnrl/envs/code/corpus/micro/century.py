def century(year):
    return (year + 99) // 100
