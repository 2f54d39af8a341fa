from blackjack import blackjack


def test_under():
    assert blackjack(10, 5) == 15


def test_twenty_one():
    assert blackjack(10, 11) == 21


def test_bust():
    assert blackjack(10, 12) == 0
    assert blackjack(20, 2) == 0
