from exam import exam


def test_top_grade():
    assert exam(95) == "A"
    assert exam(90) == "A"


def test_middle_grade():
    assert exam(89) == "B"
    assert exam(75) == "B"


def test_low_grade():
    assert exam(74) == "C"
    assert exam(10) == "C"
