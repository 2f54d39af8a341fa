from fine import fine


def test_within_limit():
    assert fine(50, 50) == 0
    assert fine(40, 50) == 0


def test_small_fine():
    assert fine(51, 50) == 50
    assert fine(70, 50) == 50


def test_large_fine():
    assert fine(71, 50) == 100
    assert fine(120, 50) == 100
