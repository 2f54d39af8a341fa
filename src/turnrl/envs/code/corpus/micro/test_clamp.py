from clamp import clamp


def test_inside():
    assert clamp(50) == 50
    assert clamp(1) == 1
    assert clamp(99) == 99


def test_too_low():
    assert clamp(-5) == 0
    assert clamp(0) == 0


def test_too_high():
    assert clamp(150) == 100
    assert clamp(100) == 100
