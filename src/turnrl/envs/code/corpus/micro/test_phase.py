from phase import phase


def test_solid():
    assert phase(-10) == "solid"
    assert phase(0) == "solid"


def test_liquid():
    assert phase(1) == "liquid"
    assert phase(99) == "liquid"


def test_gas():
    assert phase(100) == "gas"
    assert phase(250) == "gas"
