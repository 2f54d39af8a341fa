from minutes import minutes


def test_under_half_a_minute():
    assert minutes(0) == 0
    assert minutes(29) == 0


def test_half_rounds_up():
    assert minutes(30) == 1
    assert minutes(90) == 2


def test_many_minutes():
    assert minutes(150) == 3
    assert minutes(600) == 10
