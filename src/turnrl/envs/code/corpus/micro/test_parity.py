from parity import is_even


def test_even():
    assert is_even(4)
    assert is_even(10)


def test_odd():
    assert not is_even(7)
    assert not is_even(1)


def test_zero():
    assert is_even(0)


def test_negative():
    assert is_even(-2)
    assert not is_even(-3)
