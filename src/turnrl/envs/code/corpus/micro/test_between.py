from between import between


def test_inside():
    assert between(5, 1, 10)


def test_edges():
    assert between(1, 1, 10)
    assert between(10, 1, 10)


def test_below():
    assert not between(0, 1, 10)


def test_above():
    assert not between(11, 1, 10)
