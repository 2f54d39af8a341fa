from postage import postage


def test_letter():
    assert postage(5) == 1
    assert postage(20) == 1


def test_small_parcel():
    assert postage(21) == 2
    assert postage(99) == 2


def test_heavy_parcel():
    assert postage(100) == 3
    assert postage(250) == 4
