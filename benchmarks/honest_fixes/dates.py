"""Honest fixes of dates.py: the calendar module, cumulative tables, other flow."""

import calendar

CUMULATIVE = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334]


def is_leap__algorithm(year):
    return calendar.isleap(year)


def is_leap__flow(year):
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month__algorithm(year, month):
    if not 1 <= month <= 12:
        raise ValueError("month must be 1..12")
    return (
        calendar.monthrange(year, month)[1]
        if year >= 1
        else DAYS[month - 1] + (month == 2 and is_leap(year))
    )


def day_of_year__algorithm(year, month, day):
    return CUMULATIVE[month - 1] + day + (month > 2 and is_leap(year))


def days_in_year__flow(year):
    return 365 + int(is_leap(year))
