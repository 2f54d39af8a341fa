from tens import tens


def test_two_digits():
    assert tens(45) == 4
    assert tens(10) == 1


def test_single_digit():
    assert tens(7) == 0


def test_three_digits():
    assert tens(123) == 2
    assert tens(980) == 8
