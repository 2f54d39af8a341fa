"""Honest fixes of wrap.py: the textwrap module is not it (it breaks long words), so a
word list with lengths; str.center is not it either (it pads the other side first)."""


def wrap__algorithm(text, width):
    if width < 1:
        raise ValueError("width must be positive")
    lines, line = [], []
    for word in text.split():
        if line and len(" ".join(line + [word])) > width:
            lines.append(" ".join(line))
            line = []
        line.append(word)
    if line:
        lines.append(" ".join(line))
    return lines


def center__flow(line, width):
    if len(line) >= width:
        return line
    pad = width - len(line)
    return line.rjust(len(line) + pad // 2).ljust(width)
