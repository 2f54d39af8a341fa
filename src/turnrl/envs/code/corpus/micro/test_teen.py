from teen import teen


def test_teenager():
    assert teen(15)


def test_edges():
    assert teen(13)
    assert teen(19)


def test_child():
    assert not teen(12)
    assert not teen(5)


def test_adult():
    assert not teen(20)
    assert not teen(40)
