def days(month, leap):
    if month == 2:
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31
