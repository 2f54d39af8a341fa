from hamming import hamming


def test_empty():
    assert hamming("", "") == 0


def test_identical():
    assert hamming("abc", "abc") == 0


def test_one_difference():
    assert hamming("abc", "abd") == 1


def test_several_differences():
    assert hamming("karolin", "kathrin") == 3
