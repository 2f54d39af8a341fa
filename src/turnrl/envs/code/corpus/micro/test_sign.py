from sign import sign


def test_positive():
    assert sign(5) == 1
    assert sign(1) == 1


def test_negative():
    assert sign(-3) == -1
    assert sign(-1) == -1


def test_zero():
    assert sign(0) == 0
