"""The codec pool's maps: same results as a loop, errors propagate, no deadlock from pool threads
or behind a busy pool, submit_map finishes once."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_zarr import pool
from replaybuf_zarr.pool import codec_pool, parallel_map, submit_map


@settings(max_examples=40, deadline=None)
@given(xs=st.lists(st.integers(-1000, 1000), max_size=60), ys=st.lists(st.integers(), min_size=60, max_size=60))
def test_parallel_map_equals_a_loop(xs, ys):
    assert parallel_map(lambda a, b: (a * 3, b), xs, ys[: len(xs)]) == [(a * 3, b) for a, b in zip(xs, ys)]


def test_parallel_map_raises_the_error_after_every_taken_row_ended():
    running = []

    def fn(i):
        running.append(i)
        time.sleep(0.002)
        if i == 5:
            raise KeyError("row 5")
        running.remove(i)
        return i

    with pytest.raises(KeyError, match="row 5"):
        parallel_map(fn, list(range(40)))
    assert running == [5]  # nothing else was still running when the error surfaced


def test_parallel_map_from_a_pool_thread_and_behind_a_busy_pool():
    release = threading.Event()
    blockers = [codec_pool().submit(release.wait) for _ in range(pool._CPUS)]  # every worker busy
    try:
        t = time.perf_counter()
        assert parallel_map(lambda x: x + 1, list(range(50))) == list(range(1, 51))
        assert time.perf_counter() - t < 5  # the caller did the rows itself; it did not wait
    finally:
        release.set()
        for b in blockers:
            b.result()
    nested = codec_pool().submit(lambda: parallel_map(lambda x: 2 * x, list(range(30))))
    assert nested.result(timeout=30) == [2 * x for x in range(30)]


def test_submit_map_finishes_once_with_results_in_order():
    calls = []
    fut = submit_map(lambda x: x * x, list(range(100)), lambda res: calls.append(res) or sum(res))
    assert fut.result(timeout=30) == sum(x * x for x in range(100))
    assert calls == [[x * x for x in range(100)]]
    small = submit_map(lambda x: x, [1, 2], sum)  # few items: done on the calling thread
    assert small.done() and small.result() == 3


def test_submit_map_errors_skip_finish():
    finished = []

    def fn(x):
        if x == 13:
            raise ValueError("thirteen")
        return x

    fut = submit_map(fn, list(range(40)), finished.append)
    with pytest.raises(ValueError, match="thirteen"):
        fut.result(timeout=30)
    assert finished == []
    bad_finish = submit_map(lambda x: x, list(range(40)), lambda res: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bad_finish.result(timeout=30)
