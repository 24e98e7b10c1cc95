"""Shared pytest fixtures.  Keep additions grouped by owner/topic under a header comment."""

from __future__ import annotations

import itertools

import pytest

# ---------------------------------------------------------------------------------------------
# Backend harnesses for the conformance suite (replaybuf_core.testing); used by
# test_conformance.py and test_roundtrip.py.  `harness` runs one test body on every backend.
# ---------------------------------------------------------------------------------------------
from replaybuf_core import ReplayBuffer
from replaybuf_core.testing import BackendHarness


class NumpyHarness(BackendHarness):
    """In-memory dict root; reopen re-reads the same dict."""

    name = "numpy"

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty_numpy()

    def new_store(self):
        return {}

    def remove_group(self, buffer, group):
        del buffer.root[group]


class ZarrMemoryHarness(BackendHarness):
    """zarr v3 on a fresh MemoryStore; reopen opens the store again."""

    name = "zarr"

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty_zarr()

    def reopen(self, buffer):
        import zarr

        return ReplayBuffer(zarr.open_group(buffer.root.store, mode="r+"))

    def reopen_read_only(self, buffer):
        import zarr

        return ReplayBuffer(zarr.open_group(buffer.root.store, mode="r+"), read_only=True)

    def new_store(self):
        from zarr.storage import MemoryStore

        return MemoryStore()

    def remove_group(self, buffer, group):
        del buffer.root[group]


class ZarrLocalHarness(ZarrMemoryHarness):
    """zarr v3 on a LocalStore directory under ``base``; reopen opens the path again."""

    def __init__(self, base):
        self.base = base
        self._n = itertools.count()

    def make_empty(self) -> ReplayBuffer:
        from zarr.storage import LocalStore

        return ReplayBuffer.create_empty_zarr(LocalStore(self.base / f"buf{next(self._n)}.zarr"))

    def new_store(self):
        from zarr.storage import LocalStore

        return LocalStore(self.base / f"store{next(self._n)}.zarr")

    def _path(self, buffer):
        return str(buffer.root.store.root)

    def crash_path(self):
        return str(self.base / f"crash{next(self._n)}.zarr")

    def reopen(self, buffer):
        return ReplayBuffer(self._path(buffer))

    def reopen_read_only(self, buffer):
        return ReplayBuffer.create_from_path(self._path(buffer))


HARNESSES = {
    "numpy": lambda tmp_path: NumpyHarness(),
    "zarr-memory": lambda tmp_path: ZarrMemoryHarness(),
    "zarr-local": lambda tmp_path: ZarrLocalHarness(tmp_path),
}


@pytest.fixture(params=list(HARNESSES))
def harness(request, tmp_path) -> BackendHarness:
    """A BackendHarness for each built-in backend/store: numpy, zarr MemoryStore, zarr LocalStore."""
    return HARNESSES[request.param](tmp_path)
