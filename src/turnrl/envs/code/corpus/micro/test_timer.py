from timer import timer


def test_under_a_minute():
    assert timer(0) == (0, 0)
    assert timer(59) == (0, 59)


def test_whole_minutes():
    assert timer(60) == (1, 0)
    assert timer(3600) == (60, 0)


def test_minutes_and_seconds():
    assert timer(125) == (2, 5)
