def season(month):
    if month <= 2 or month == 12:
        return "winter"
    return "spring" if month <= 5 else "summer" if month <= 8 else "autumn"
