from ticket import ticket


def test_child():
    assert ticket(5) == 5
    assert ticket(11) == 5


def test_adult():
    assert ticket(12) == 10
    assert ticket(30) == 10
    assert ticket(64) == 10


def test_senior():
    assert ticket(65) == 5
    assert ticket(80) == 5
