"""A rechunk's swap on a store without rename (object storage: S3, GCS, Azure), cut at every point:
the store then reopens (recovery) with every committed value intact, old layout or new.

Before the fix, an array was moved by copying its objects and deleting them in listing order
(S3 lists ``c/...`` before ``zarr.json``): a kill mid-delete left ``img/zarr.json`` with chunks
missing, and recovery deleted both whole copies (the backup and the new array) — frames read back as
zeros.  Here a store that dies after its N-th mutating call (every later call fails too, as in a
killed process) stands in for the kill, for every N a swap takes; its listing is lexicographic, as
S3's is.  Expected values come from the episodes written, not from the code under test."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

from replaybuf_core import ReplayBuffer

# the recovery of a cut swap warns (what it restored or removed): expected at most cut points
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


class Killed(BaseException):
    """The process died here (no handler of the code under test may run after it)."""


class DyingStore(MemoryStore):
    """A MemoryStore that lists keys in lexicographic order (as object stores do) and dies after
    ``budget`` more mutating calls (None: never)."""

    budget: int | None = None
    calls = 0

    def _spend(self) -> None:
        DyingStore.calls += 1
        if self.budget is not None:
            if self.budget <= 0:
                raise Killed()
            type(self).budget = self.budget - 1

    async def set(self, key, value, byte_range=None):
        self._spend()
        return await super().set(key, value)

    async def set_if_not_exists(self, key, value):
        self._spend()
        return await super().set_if_not_exists(key, value)

    async def delete(self, key):
        self._spend()
        return await super().delete(key)

    async def list_prefix(self, prefix):
        for key in sorted([k async for k in super().list_prefix(prefix)]):
            yield key

    async def list_dir(self, prefix):
        for key in sorted([k async for k in super().list_dir(prefix)]):
            yield key

    async def list(self):
        for key in sorted([k async for k in super().list()]):
            yield key


def _episodes():
    rng = np.random.default_rng(7)
    return [{"img": rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8),
             "obs": rng.normal(size=(n, 3)).astype(np.float32)} for n in (5, 7, 4)]


def _make(store: DyingStore) -> None:
    rb = ReplayBuffer.create_empty("zarr", store)
    for ep in _episodes():
        rb.add_episode(ep, chunks={"img": (2, 8, 8, 3), "obs": (4, 3)})
    rb.close()


def _rechunk(store: DyingStore) -> None:
    rb = ReplayBuffer(zarr.open_group(store, mode="r+"), backend="zarr")
    rb.set_chunks({"img": (3, 8, 8, 3), "obs": (5, 3)})


def _calls_of_a_whole_rechunk() -> int:
    store = DyingStore()
    _make(store)
    DyingStore.calls = 0
    _rechunk(store)
    return DyingStore.calls


@pytest.fixture(autouse=True)
def _reset():
    yield
    DyingStore.budget = None


@pytest.mark.parametrize("fraction", [i / 40 for i in range(41)])
def test_a_swap_cut_anywhere_keeps_every_committed_value(fraction):
    total = _calls_of_a_whole_rechunk()
    store = DyingStore()
    _make(store)
    DyingStore.budget = int(round(fraction * total))
    try:
        _rechunk(store)
    except Killed:
        pass
    DyingStore.budget = None  # the next process: a writable open recovers
    rb = ReplayBuffer(zarr.open_group(store, mode="r+"), backend="zarr")
    want = _episodes()
    assert rb.n_episodes == len(want)
    assert sorted(rb.keys()) == ["img", "obs"] and not [k for k in rb.store.list_arrays("data") if k.startswith("_")]
    for i, ep in enumerate(want):
        got = rb.get_episode(i, copy=True)
        for key, values in ep.items():
            np.testing.assert_array_equal(got[key], values, err_msg=f"{key} of episode {i}, cut at {fraction:.3f}")
    assert rb.get_chunks()["img"][0] in (2, 3)
    leftovers = sorted(k for k in store._store_dict if "/_temp" in k)
    assert leftovers == [], leftovers  # no debris of the temp arrays stays behind
