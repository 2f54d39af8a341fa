from cartons import cartons


def test_empty():
    assert cartons(0) == 0


def test_full_cartons():
    assert cartons(12) == 1
    assert cartons(24) == 2


def test_partial_carton():
    assert cartons(1) == 1
    assert cartons(13) == 2
    assert cartons(22) == 2
