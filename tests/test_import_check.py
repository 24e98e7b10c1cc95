"""The import's read-back check (:mod:`replaybuf_core.importing.check`): rows are read in whole chunks,
each once; checks run beside the importing thread yet their findings merge in the order they were
started; a pass-through key's failure is raised, not collected.  Expected values come from NumPy on
the arrays the fake store holds, never from the checker."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from replaybuf_core.importing import check
from replaybuf_core.importing.check import Checker, PassThroughMismatch, psnr_db
from replaybuf_core.importing.plan import KeyPlan
from replaybuf_core.source import KeySpec

N, SHAPE, CHUNK = 40, (4, 6, 3), 8


class Store:
    """The stored rows of one key, and every read of them."""

    def __init__(self, rows: np.ndarray, gate=None):
        self.rows, self.reads, self.gate = rows, [], gate
        self._lock = threading.Lock()

    def read(self, group, key, start, stop):
        if self.gate is not None:
            self.gate(start, stop)
        with self._lock:
            if stop > start:
                self.reads.append((start, stop))
        return self.rows[start:stop].copy()


def plan(lossy: bool = False) -> KeyPlan:
    spec = KeySpec(np.dtype(np.uint8), SHAPE, "frames")
    return KeyPlan("cam", spec, (N,) + SHAPE, spec.dtype, spec.dtype, (CHUNK,) + SHAPE, None, None, True, False,
                   lossy)


@pytest.fixture(autouse=True)
def no_whole_keys(monkeypatch):
    monkeypatch.setattr(check, "WHOLE_KEY_BYTES", 0)  # the key is checked in parts, as a camera is


def frames(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (N,) + SHAPE, dtype=np.uint8)


def stage_all(c: Checker, source: np.ndarray, part: int = 5) -> None:
    """Stage ``source`` in parts of ``part`` rows; episode i holds rows [10 i, 10 i + 10)."""
    for start in range(0, N, part):
        c.stage("cam", start, source[start:start + part], start // 10)


@pytest.mark.parametrize("threads", [0, 2])
def test_rows_are_read_in_whole_chunks_each_once_and_the_first_difference_is_named(threads):
    source = frames(0)
    stored = source.copy()
    stored[17, 1, 2, 0] ^= 1  # episode 1
    stored[30, 0, 0, 2] ^= 4  # episode 3
    store = Store(stored)
    c = Checker(store, {"cam": plan()}, threads=threads)
    stage_all(c, source)
    for rows in (5, 10, 13, 20, 27):  # what the writer reports stored, step by step
        c.check({"cam": rows})
    c.check({"cam": N})
    c.wait()
    c.close()
    assert sorted(store.reads) == [(0, 8), (8, 16), (16, 24), (24, 40)]  # chunk-aligned, the end excepted
    assert c.unchecked() == {}
    assert c.first_bad == {"cam": 1}
    assert c.problems == ["data/cam: episode 1: rows [16, 20) differ from the source (first: row 17)"]
    want = np.stack([np.bincount(stored[..., ch].ravel(), minlength=256) for ch in range(3)])
    np.testing.assert_array_equal(c.hist["cam"], want)  # every stored row, once


def test_findings_merge_in_the_order_the_checks_started():
    source = frames(1)
    stored = source.copy()
    stored[3] ^= 1   # episode 0, in the first check
    stored[12] ^= 1  # episode 1, in the second
    second_done = threading.Event()

    def gate(start, stop):  # the first check finishes only after the second one
        if start == 0 and stop:
            assert second_done.wait(30)

    store = Store(stored, gate)
    c = Checker(store, {"cam": plan()}, threads=2)
    stage_all(c, source)
    c.check({"cam": 8})

    def second_read(group, key, start, stop):
        out = Store.read(store, group, key, start, stop)
        if start == 8:
            second_done.set()
        return out

    store.read = second_read
    c.check({"cam": 16})
    c.wait()
    c.close()
    assert c.first_bad == {"cam": 0}
    assert c.problems[0].startswith("data/cam: episode 0: rows [0, 5) differ from the source (first: row 3)")


def test_lossy_errors_give_the_psnr_of_numpy():
    source = frames(2)
    stored = np.clip(source.astype(np.int16) + np.random.default_rng(3).integers(-3, 4, source.shape), 0,
                     255).astype(np.uint8)
    c = Checker(Store(stored), {"cam": plan(lossy=True)}, threads=2)
    stage_all(c, source)
    c.check({"cam": 20})
    c.check({"cam": N})
    c.wait()
    c.finish_lossy()
    c.close()
    err = (stored.astype(np.float64) - source) ** 2
    assert c.sse["cam"] == pytest.approx(err.sum())
    per_episode = [psnr_db(err[i:i + 10].sum(), err[i:i + 10].size) for i in range(0, N, 10)]
    assert c.worst["cam"] == pytest.approx(min(per_episode))
    assert c.problems == []


def test_a_passthrough_key_that_fails_raises_and_any_other_read_error_propagates():
    source = frames(4)
    stored = source.copy()
    stored[9, 0, 0, 0] ^= 1
    c = Checker(Store(stored), {"cam": plan()}, passthrough=["cam"], threads=2)
    stage_all(c, source)
    with pytest.raises(PassThroughMismatch, match=r"data/cam: episode 0: rows \[5, 10\) .*first: row 9") as e:
        c.check({"cam": 16})
        c.wait()
    assert (e.value.key, e.value.episode) == ("cam", 0)
    c.close()

    class Broken(Store):
        def read(self, group, key, start, stop):
            if stop > start:
                raise ValueError(f"rows {start}..{stop - 1} do not decode")
            return self.rows[:0]

    c = Checker(Broken(stored), {"cam": plan()}, passthrough=["cam"], threads=0)
    stage_all(c, source)
    with pytest.raises(PassThroughMismatch, match=r"episode 0: rows \[0, 8\) do not read back: rows 0..7 do not decode"):
        c.check({"cam": 8})
    c = Checker(Broken(stored), {"cam": plan()}, threads=2)
    stage_all(c, source)
    with pytest.raises(ValueError, match="rows 0..7 do not decode"):
        c.check({"cam": 8})
        c.wait()
    c.close()


def test_an_error_unwinding_after_a_passthrough_mismatch_gives_way_to_it():
    """The writer trimming its uncommitted rows may decode the camera's broken chunk on the way out:
    the import must still see the mismatch (and start again with the camera re-encoded)."""
    source = frames(5)
    stored = source.copy()
    stored[2] ^= 1
    c = Checker(Store(stored), {"cam": plan()}, passthrough=["cam"], threads=0)
    stage_all(c, source)
    with pytest.raises(PassThroughMismatch, match="episode 0") as e:
        with c.mismatch_first():
            try:
                c.check({"cam": 8})
            finally:
                raise ValueError("chunk 1 does not decode")  # what leaving the writer may raise
    assert isinstance(e.value.__cause__, ValueError)
    with pytest.raises(KeyError):  # any other error passes through as it is
        with Checker(Store(stored), {"cam": plan()}, threads=0).mismatch_first():
            raise KeyError("x")
