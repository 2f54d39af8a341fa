from century import century


def test_last_year_of_century():
    assert century(1900) == 19
    assert century(2000) == 20


def test_first_year_of_century():
    assert century(1901) == 20
    assert century(101) == 2


def test_early_years():
    assert century(1) == 1
    assert century(100) == 1
