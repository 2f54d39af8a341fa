from squares import squares


def test_zero():
    assert squares(0) == 0


def test_one():
    assert squares(1) == 1


def test_several():
    assert squares(3) == 14
    assert squares(5) == 55
