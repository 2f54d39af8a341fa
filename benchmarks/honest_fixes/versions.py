"""Honest fixes of versions.py: tuples for lists, max() with a key, leniency."""


def parse_version__lenient(text):
    """Also accepts a leading "v" and surrounding spaces (outside the documented domain)."""
    parts = [int(p) for p in text.strip().lstrip("vV").split(".")]
    while len(parts) > 1 and not parts[-1]:
        del parts[-1]
    return parts


def compare__algorithm(a, b):
    pa, pb = tuple(parse_version(a)), tuple(parse_version(b))
    return (pa > pb) - (pa < pb)


def latest__algorithm(versions):
    best = versions[0]
    for v in versions:
        if parse_version(v) > parse_version(best):
            best = v
    return best


def bump__flow(version, part):
    nums = list(map(int, version.split(".")))
    nums = nums[:part] + [nums[part] + 1] + [0] * (len(nums) - part - 1)
    return ".".join(map(str, nums))
