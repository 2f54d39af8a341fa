from winner import winner


def test_draw():
    assert winner(0, 0) == 0
    assert winner(2, 2) == 0


def test_first_wins():
    assert winner(1, 0) == 1
    assert winner(2, 1) == 1
    assert winner(0, 2) == 1


def test_second_wins():
    assert winner(0, 1) == -1
    assert winner(1, 2) == -1
    assert winner(2, 0) == -1
