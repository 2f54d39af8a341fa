from pages import pages


def test_empty():
    assert pages(0, 10) == 0


def test_exact_fit():
    assert pages(10, 10) == 1
    assert pages(25, 5) == 5


def test_partial_page():
    assert pages(11, 10) == 2
    assert pages(1, 10) == 1
