"""Honest fixes of bits.py: builtins instead of loops, other expressions."""


def count_bits__algorithm(n):
    return bin(n).count("1")


def is_power_of_two__algorithm(n):
    return n > 0 and bin(n).count("1") == 1


def parity__type(n):
    return bin(n).count("1") % 2 == 1  # a bool: True == 1, as the tests compare


def highest_bit__algorithm(n):
    if n <= 0:
        raise ValueError("n must be positive")
    return n.bit_length() - 1


def to_bits__algorithm(n, width):
    return format(n & ((1 << width) - 1), f"0{width}b") if width > 0 else ""


def to_bits__flow(n, width):
    out = []
    for i in reversed(range(width)):
        out.append(str((n >> i) & 1))
    return "".join(out)
