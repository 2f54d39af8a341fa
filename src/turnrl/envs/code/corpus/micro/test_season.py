from season import season


def test_winter():
    assert season(1) == "winter"
    assert season(2) == "winter"
    assert season(12) == "winter"


def test_spring():
    assert season(3) == "spring"
    assert season(5) == "spring"


def test_summer():
    assert season(6) == "summer"
    assert season(8) == "summer"


def test_autumn():
    assert season(9) == "autumn"
    assert season(11) == "autumn"
