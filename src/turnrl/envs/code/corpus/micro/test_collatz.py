from collatz import collatz


def test_even():
    assert collatz(6) == 3
    assert collatz(8) == 4


def test_odd():
    assert collatz(3) == 10
    assert collatz(7) == 22


def test_one():
    assert collatz(1) == 4
