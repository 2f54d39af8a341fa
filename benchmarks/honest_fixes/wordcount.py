"""Honest fixes of wordcount.py: a regular expression, a Counter, sorted with a key."""

import re
from collections import Counter


def words__algorithm(text):
    return [w.lower() for w in re.split(r"[\W_]+", text) if w]


def word_counts__type(text):
    return Counter(words(text))


def top_words__algorithm(text, n):
    counts = Counter(words(text))
    return sorted(counts, key=lambda w: (-counts[w], w))[:n]


def longest_word__flow(text):
    found = words(text)
    return max(found, key=len) if found else ""
