from perimeter import perimeter


def test_rectangle():
    assert perimeter(3, 4) == 14


def test_square():
    assert perimeter(5, 5) == 20


def test_narrow():
    assert perimeter(2, 1) == 6


def test_wide():
    assert perimeter(1, 2) == 6
