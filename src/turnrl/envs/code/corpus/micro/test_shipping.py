from shipping import shipping


def test_small_order():
    assert shipping(10) == 5


def test_threshold():
    assert shipping(50) == 0
    assert shipping(49) == 5


def test_large_order():
    assert shipping(100) == 0
