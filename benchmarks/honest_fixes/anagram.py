"""Honest fixes of anagram.py: other algorithms, a Counter for a dict, helpers."""

from collections import Counter, defaultdict


def signature__algorithm(word):
    letters = [ch for ch in word.casefold() if ch != " "]
    letters.sort()
    return "".join(letters)


def is_anagram__algorithm(a, b):
    key = lambda w: Counter(w.lower().replace(" ", ""))  # noqa: E731
    return a.lower() != b.lower() and key(a) == key(b)


def group_anagrams__helper(words):
    buckets = defaultdict(list)
    for w in words:
        buckets[signature(w)].append(w)
    return _groups_of_two_or_more(buckets)


def _groups_of_two_or_more(buckets):
    groups = [sorted(g) for g in buckets.values() if len(g) >= 2]
    groups.sort(key=lambda g: g[0])
    return groups


def count_letters__type(word):
    return Counter(ch for ch in word.lower() if ch.isalpha())


def count_letters__flow(word):
    counts = {}
    for ch in filter(str.isalpha, word.lower()):
        counts[ch] = counts[ch] + 1 if ch in counts else 1
    return counts
