from tax import tax


def test_below_threshold():
    assert tax(500) == 0
    assert tax(1000) == 0


def test_just_above():
    assert tax(1001) == 50
    assert tax(1004) == 50
    assert tax(1005) == 51


def test_higher_income():
    assert tax(1100) == 70
    assert tax(2000) == 250
