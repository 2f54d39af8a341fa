from mean import mean


def test_equal_values():
    assert mean(5, 5, 5) == 5


def test_mixed_values():
    assert mean(1, 2, 3) == 2
    assert mean(2, 4, 9) == 5


def test_rounds_down():
    assert mean(1, 1, 2) == 1
    assert mean(0, 0, 2) == 0
