from bonus import bonus


def test_no_bonus():
    assert bonus(500) == 0
    assert bonus(1000) == 0


def test_just_over():
    assert bonus(1001) == 100


def test_large_sales():
    assert bonus(2000) == 200
    assert bonus(2345) == 234
