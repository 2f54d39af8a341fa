from distance import distance


def test_from_origin():
    assert distance(0, 0, 3, 4) == 7
    assert distance(3, 4, 0, 0) == 7


def test_same_point():
    assert distance(1, 1, 1, 1) == 0


def test_vertical():
    assert distance(2, 5, 2, 1) == 4


def test_negative():
    assert distance(-1, 0, 2, 0) == 3
