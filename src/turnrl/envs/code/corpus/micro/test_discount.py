from discount import discount


def test_no_discount():
    assert discount(80, 0) == 80


def test_half_price():
    assert discount(80, 50) == 40


def test_rounds_discount_down():
    assert discount(99, 10) == 90
    assert discount(7, 50) == 4


def test_free():
    assert discount(80, 100) == 0
