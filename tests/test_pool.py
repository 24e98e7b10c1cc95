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


def test_a_ctrl_c_inside_any_enter_of_the_callers_map_leaves_no_lock_held():
    """A Ctrl-C lands between bytecodes, also inside a Python-level ``__enter__`` after it took its lock
    and before the ``with`` block began (``threading.Condition.__enter__`` is Python): the lock stays
    held, every helper waits on it for ever, and the interpreter's exit joining the pool's threads
    hangs (a Ctrl-C'd ``replaybuf merge`` that never exited).  Here a KeyboardInterrupt is raised as
    every Python ``__enter__`` the caller's share of the map runs returns: none may leave a lock
    taken — the helpers then finish the map."""
    import sys

    release = threading.Event()
    sm = pool.SharedMap(lambda x: release.wait(5) and x, list(range(64)), 1)  # a helper is on it

    def tracer(frame, event, arg):
        if frame.f_code.co_name == "__enter__":
            return local
        return tracer if event == "call" else None

    def local(frame, event, arg):
        if event == "return":
            raise KeyboardInterrupt
        return local

    release.set()
    interrupted = False
    sys.settrace(tracer)
    try:
        sm.join()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(None)
    if not interrupted:  # no Python __enter__ ran: nothing could keep a lock
        assert sm.join() == list(range(64))

    def held(lock):  # by anyone: another thread cannot take it
        got = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(blocking=False) and (lock.release() or True)))
        t.start()
        t.join()
        return not got[0]

    assert not held(sm._cond._lock)
    done = codec_pool().submit(lambda: sm._work())  # the helpers can still take the lock
    assert isinstance(done.result(timeout=10), bool)  # it returned: the lock was free


def _blocked_map(release: threading.Event) -> pool.SharedMap:
    """A map of one item its one helper computes until ``release`` is set (or 10 s pass)."""
    started = threading.Event()
    sm = pool.SharedMap(lambda x: (started.set(), release.wait(10), x)[2], ["a"], 1)
    assert started.wait(10)
    return sm


def _on_a_thread(fn):
    """``fn()`` on a thread other than the main thread (only those help other maps): its result, or
    its exception raised here."""
    got = []

    def run():
        try:
            got.append(("ok", fn()))
        except BaseException as exc:  # handed back to the test
            got.append(("error", exc))

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert got, "the thread did not finish in 30 s"
    kind, value = got[0]
    if kind == "error":
        raise value
    return value


def test_a_join_waiting_on_its_helper_computes_another_maps_items():
    """While a join (on a thread other than the main one: a loader's prefetch thread) waits for its
    helper's last item, it computes the items of another shared map still waiting to be taken (the
    loader's next batch): here every item of ``other`` (which has no helper of its own) is computed
    by that thread during ``first.join()``, and ``other.join()`` then has nothing left to compute."""
    release = threading.Event()
    first = _blocked_map(release)
    by = []

    def item(x):
        by.append(threading.get_ident())
        if len(by) == 10:
            release.set()  # the helper of `first` ends once every item of `other` is done
        return x * 2

    other = pool.SharedMap(item, list(range(10)), 0, share=True)
    joiner = []
    assert _on_a_thread(lambda: joiner.append(threading.get_ident()) or first.join()) == ["a"]
    assert release.is_set() and by == joiner * 10
    assert other.join() == [x * 2 for x in range(10)]
    assert len(by) == 10  # nothing computed twice
    assert not pool._LIVE


def test_another_maps_error_stays_with_it():
    """A stolen item's error, even a KeyboardInterrupt, is that map's, raised by its own join, not
    by the join that helped."""
    for error in (ValueError("item 3"), KeyboardInterrupt()):
        release = threading.Event()
        first = _blocked_map(release)

        def bad(x, error=error):
            if x == 3:
                release.set()
                raise error
            return x

        other = pool.SharedMap(bad, list(range(8)), 0, share=True)
        assert _on_a_thread(first.join) == ["a"]
        with pytest.raises(type(error)):
            other.join()
        assert not pool._LIVE  # no map is left behind with items to take


@pytest.mark.parametrize("share", [False, True])
def test_the_main_thread_and_maps_not_shared_never_help(share):
    """Items not marked ``share`` (an object store's fetches, each waiting on the network) are never
    taken by another map's join, and a join on the main thread (where a Ctrl-C lands, and a reader
    must not wait on another thread's decodes) never takes another map's items: it waits for its
    own helper instead."""
    release = threading.Event()
    first = _blocked_map(release)
    by = []
    other = pool.SharedMap(lambda x: by.append(x) or x, list(range(10)), 0, share=share)
    timer = threading.Timer(0.5, release.set)
    timer.start()
    assert (first.join() if share else _on_a_thread(first.join)) == ["a"]
    assert by == []
    assert other.join() == list(range(10))
    timer.join()


def test_a_forked_child_reads_files_while_a_parent_thread_held_the_file_pool_lock(tmp_path):
    """A DataLoader worker forked while another thread of the parent was inside the open-file pool's
    lock (a read in flight) waited for that lock for ever at its first read.  Here a thread holds
    the lock across the fork; the child must open and read a file within 20 s."""
    import os

    from replaybuf_zarr.file_pool import FILES

    path = tmp_path / "f"
    path.write_bytes(b"abc")
    held, done = threading.Event(), threading.Event()

    def hold():
        with FILES._lock:
            held.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the read works
        ok = False
        try:
            h = FILES.open(12345, str(path))
            ok = h is not None and os.pread(h.fd, 3, 0) == b"abc"
        finally:
            os._exit(0 if ok else 1)
    done.set()
    t.join()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung on the file pool's lock")


def test_a_failed_row_read_raises_its_error_again():
    """``RowsRead.result()`` of a failed read raises the same error on every call (it returned None
    on the second one: a caller retrying got no rows and no error)."""
    from replaybuf_zarr.row_gather import RowsRead

    read = RowsRead(finish=lambda: 1 / 0)
    for _ in range(2):
        with pytest.raises(ZeroDivisionError):
            read.result()
