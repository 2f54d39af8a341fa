from darts import darts


def test_bullseye():
    assert darts(0, 0) == 10
    assert darts(1, 0) == 10
    assert darts(0, 1) == 10


def test_middle_ring():
    assert darts(1, 1) == 5
    assert darts(2, 2) == 5
    assert darts(3, 4) == 5


def test_outer_ring():
    assert darts(5, 1) == 1
    assert darts(5, 5) == 1
    assert darts(6, 8) == 1


def test_miss():
    assert darts(10, 1) == 0
    assert darts(20, 0) == 0
