from thermostat import thermostat


def test_cold():
    assert thermostat(10) == "heat"
    assert thermostat(17) == "heat"


def test_comfortable():
    assert thermostat(18) == "off"
    assert thermostat(20) == "off"
    assert thermostat(24) == "off"


def test_hot():
    assert thermostat(25) == "cool"
    assert thermostat(30) == "cool"
