"""Honest fixes of caesar.py: translation tables, string constants, a generator."""

import string


def shift_char__algorithm(ch, k):
    for alphabet in (string.ascii_lowercase, string.ascii_uppercase):
        i = alphabet.find(ch)
        if i >= 0 and len(ch) == 1:
            return alphabet[(i + k) % 26]
    return ch


def encrypt__algorithm(text, k):
    k %= 26
    lower, upper = string.ascii_lowercase, string.ascii_uppercase
    table = str.maketrans(lower + upper, lower[k:] + lower[:k] + upper[k:] + upper[:k])
    return text.translate(table)


def decrypt__flow(text, k):
    return encrypt(text, 26 - k % 26)


def crack__flow(cipher, known_word):
    found = (k for k in range(26) if known_word in decrypt(cipher, k))
    return next(found, None)
