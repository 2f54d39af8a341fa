from majority import majority


def test_first_two():
    assert majority(True, True, False)
    assert not majority(False, False, True)


def test_last_two():
    assert majority(False, True, True)
    assert not majority(True, False, False)


def test_first_and_last():
    assert majority(True, False, True)
    assert not majority(False, True, False)


def test_all_or_none():
    assert majority(True, True, True)
    assert not majority(False, False, False)
