from wages import wages


def test_regular_hours():
    assert wages(10, 10) == 100
    assert wages(40, 10) == 400


def test_overtime():
    assert wages(41, 10) == 415
    assert wages(50, 20) == 1100


def test_overtime_rounds_down():
    assert wages(41, 3) == 124
