from quadrant import quadrant


def test_right_half():
    assert quadrant(2, 3) == 1
    assert quadrant(3, 1) == 1
    assert quadrant(2, -3) == 4


def test_left_half():
    assert quadrant(-2, 3) == 2
    assert quadrant(-2, -3) == 3


def test_axes():
    assert quadrant(0, 1) == 2
    assert quadrant(1, 0) == 4
    assert quadrant(0, 0) == 3
