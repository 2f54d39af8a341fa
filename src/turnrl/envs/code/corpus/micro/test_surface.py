from surface import surface


def test_unit_cube():
    assert surface(1, 1, 1) == 6


def test_long():
    assert surface(1, 1, 3) == 14


def test_box():
    assert surface(2, 3, 4) == 52


def test_flat():
    assert surface(3, 4, 0) == 24
