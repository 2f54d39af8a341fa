from largest import largest


def test_first():
    assert largest(3, 2, 1) == 3
    assert largest(3, 1, 2) == 3


def test_middle():
    assert largest(1, 3, 2) == 3
    assert largest(2, 3, 1) == 3


def test_last():
    assert largest(1, 2, 3) == 3
    assert largest(2, 1, 3) == 3


def test_negative():
    assert largest(-5, -2, -9) == -2
