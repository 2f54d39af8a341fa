"""Honest fixes of histogram.py: clamping with min/max, a Counter of bins."""

from collections import Counter


def bin_index__flow(x, lo, width, nbins):
    return min(max(int((x - lo) // width), 0), nbins - 1)


def histogram__algorithm(values, lo, hi, nbins):
    if not (hi > lo and nbins >= 1):
        raise ValueError("bad range")
    width = (hi - lo) / nbins
    seen = Counter(bin_index(x, lo, width, nbins) for x in values)
    return [seen[i] for i in range(nbins)]


def render__flow(counts, char="#"):
    lines = []
    for i, c in enumerate(counts):
        lines.append(str(i) + "|" + char * c)
    return "\n".join(lines)
