"""prefetch: same items in order, errors re-raised at their item, early close stops the producer."""

import threading

import pytest

from replaybuf_core.importing.prefetch import prefetch


def test_same_items_in_order():
    assert list(prefetch(iter(range(100)), depth=3)) == list(range(100))


def test_error_is_raised_at_its_item():
    def gen():
        yield 1
        yield 2
        raise KeyError("boom")

    got = []
    with pytest.raises(KeyError, match="boom"):
        for x in prefetch(gen()):
            got.append(x)
    assert got == [1, 2]


def test_early_close_stops_the_producer():
    produced = []

    def gen():
        for i in range(10_000):
            produced.append(i)
            yield i

    it = prefetch(gen(), depth=2)
    assert next(it) == 0
    it.close()
    n = len(produced)
    assert n <= 5  # depth items ahead, not the whole iterable
    assert not any(t.name == "replaybuf-prefetch" and t.is_alive() for t in threading.enumerate())


def test_bad_depth():
    with pytest.raises(ValueError):
        list(prefetch([], depth=0))
