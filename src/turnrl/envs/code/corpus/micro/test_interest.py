from interest import interest


def test_no_years():
    assert interest(1000, 0) == 1000


def test_one_year():
    assert interest(1000, 1) == 1050
    assert interest(100, 1) == 105


def test_compound():
    assert interest(1000, 2) == 1102


def test_small_amount():
    assert interest(10, 3) == 10
