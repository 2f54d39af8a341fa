from shape import shape


def test_equilateral():
    assert shape(3, 3, 3) == "equilateral"


def test_isosceles():
    assert shape(3, 3, 5) == "isosceles"
    assert shape(5, 3, 3) == "isosceles"
    assert shape(3, 5, 3) == "isosceles"


def test_scalene():
    assert shape(3, 4, 5) == "scalene"
