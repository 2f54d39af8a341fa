from parking import parking


def test_free():
    assert parking(0) == 0
    assert parking(1) == 0


def test_paid():
    assert parking(2) == 8
    assert parking(5) == 20


def test_all_day():
    assert parking(10) == 40
