from area import area


def test_even_product():
    assert area(4, 3) == 6
    assert area(10, 10) == 50


def test_odd_product_rounds_down():
    assert area(3, 3) == 4
    assert area(5, 1) == 2


def test_zero():
    assert area(0, 7) == 0
