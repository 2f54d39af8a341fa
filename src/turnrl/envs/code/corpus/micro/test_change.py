from change import change


def test_exact():
    assert change(5, 5) == 0


def test_gives_change():
    assert change(3, 10) == 7
    assert change(99, 100) == 1


def test_not_enough():
    assert change(10, 3) == -1
    assert change(5, 4) == -1
