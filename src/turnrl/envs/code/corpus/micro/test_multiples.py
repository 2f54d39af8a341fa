from multiples import multiples


def test_none():
    assert multiples(1) == 0
    assert multiples(3) == 0


def test_threes():
    assert multiples(4) == 3


def test_threes_and_fives():
    assert multiples(6) == 8
    assert multiples(10) == 23


def test_counted_once():
    assert multiples(16) == 60
