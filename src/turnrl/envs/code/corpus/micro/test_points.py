from points import points


def test_no_games():
    assert points(0, 0) == 0


def test_wins_only():
    assert points(2, 0) == 6


def test_draws_only():
    assert points(0, 4) == 4


def test_mixed():
    assert points(3, 1) == 10
