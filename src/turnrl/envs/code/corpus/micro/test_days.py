from days import days


def test_february():
    assert days(2, False) == 28
    assert days(2, True) == 29


def test_thirty_days():
    assert days(4, False) == 30
    assert days(6, True) == 30
    assert days(9, False) == 30


def test_november():
    assert days(11, False) == 30


def test_thirty_one_days():
    assert days(1, False) == 31
    assert days(7, True) == 31
    assert days(12, False) == 31
