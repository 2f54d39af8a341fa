from leap import leap


def test_divisible_by_four():
    assert leap(2024)
    assert leap(1996)


def test_common_year():
    assert not leap(2023)
    assert not leap(2019)


def test_century():
    assert not leap(1900)
    assert not leap(2100)


def test_fourth_century():
    assert leap(2000)
    assert leap(1600)
