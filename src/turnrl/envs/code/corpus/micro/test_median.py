from median import median


def test_sorted():
    assert median(1, 2, 3) == 2


def test_with_zero():
    assert median(4, 0, 2) == 2
    assert median(3, 7, 0) == 3


def test_negative():
    assert median(-2, -5, 0) == -2


def test_repeated():
    assert median(5, 5, 0) == 5
