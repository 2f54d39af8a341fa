"""Honest fixes of strings.py: two pointers, a regex split, str methods."""


def is_palindrome__algorithm(text):
    chars = [ch.lower() for ch in text if ch.isalnum()]
    i, j = 0, len(chars) - 1
    while i < j:
        if chars[i] != chars[j]:
            return False
        i, j = i + 1, j - 1
    return True


def reverse_words__flow(sentence):
    words = sentence.split()
    words.reverse()
    return " ".join(words)


def count_vowels__algorithm(text):
    lowered = text.lower()
    return sum(lowered.count(v) for v in VOWELS)


def capitalize_words__algorithm(text):
    return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


def common_prefix__algorithm(a, b):
    for n, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return a[:n]
    return a[: min(len(a), len(b))]
