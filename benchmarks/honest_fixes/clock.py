"""Honest fixes of clock.py: divmod, a regular expression, leniency outside the domain."""

import re

_TIME = re.compile(r"\s*(\d{1,2}):(\d{2})\s*")


def parse__lenient(hhmm):
    """Also takes surrounding spaces and a one-digit hour (outside the documented domain)."""
    m = _TIME.fullmatch(hhmm)
    if m is None:
        raise ValueError(f"invalid time {hhmm}")
    h, mm = int(m.group(1)), int(m.group(2))
    if h > 23 or mm > 59:
        raise ValueError(f"invalid time {hhmm}")
    return 60 * h + mm


def fmt__algorithm(total):
    h, m = divmod(total % 1440, 60)
    return "%02d:%02d" % (h, m)


def add_minutes__flow(hhmm, delta):
    minutes = parse(hhmm)
    return fmt(minutes + delta)


def minutes_between__algorithm(start, end):
    return (parse(end) - parse(start)) % (24 * 60)
