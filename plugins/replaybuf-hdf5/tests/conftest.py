"""Fixtures of the replaybuf-hdf5 tests: the conformance harness for HDF5 files."""

from __future__ import annotations

import itertools

import pytest

from replaybuf_core import ReplayBuffer

try:
    from replaybuf_core.testing import BackendHarness
except ImportError:  # the conformance suite is not in this replaybuf version
    BackendHarness = object  # type: ignore[misc,assignment]


class Hdf5Harness(BackendHarness):
    """One fresh ``.h5`` file per buffer under ``base``; reopen flushes and opens the path again.

    The old buffer stays open: the suite still reads it after a reopen (``buf.keys()``), and HDF5
    lets one process open a file twice.  Reading a file after it is closed, and from another
    process, is tested in test_hdf5_backend.py."""

    name = "hdf5"
    #: HDF5 is not crash-consistent inside its own flush, nor when a compressed chunk is rewritten in
    #: place at the same size: a kill there can leave a file that no longer opens (docs/backends.md)
    kill_safe = False

    def __init__(self, base):
        self.base = base
        self._n = itertools.count()

    def _path(self) -> str:
        return str(self.base / f"buf{next(self._n)}.h5")

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty("hdf5", store=self._path())

    def reopen(self, buffer: ReplayBuffer) -> ReplayBuffer:
        buffer.store.flush()
        return ReplayBuffer(buffer.store.filename, backend="hdf5")

    def reopen_read_only(self, buffer: ReplayBuffer) -> ReplayBuffer:
        buffer.store.flush()
        return ReplayBuffer(buffer.store.filename, backend="hdf5", read_only=True)

    def new_store(self) -> str:
        return self._path()

    def crash_path(self) -> str:
        return self._path()

    def remove_group(self, buffer: ReplayBuffer, group: str) -> None:
        del buffer.root[group]


class Hdf5MemoryHarness(BackendHarness):
    """In-memory HDF5 files (``driver="core"``); reopen wraps the same open file again."""

    name = "hdf5"

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty("hdf5")

    def new_store(self):
        import uuid

        import h5py

        return h5py.File(f"mem-{uuid.uuid4().hex}.h5", "w", driver="core", backing_store=False)

    def remove_group(self, buffer: ReplayBuffer, group: str) -> None:
        del buffer.root[group]


@pytest.fixture(params=["file", "memory"])
def harness(request, tmp_path):
    """The conformance harness: HDF5 files on disk, and in-memory HDF5 files."""
    if BackendHarness is object:
        pytest.skip("replaybuf_core.testing (the conformance suite) is not available")
    return Hdf5Harness(tmp_path) if request.param == "file" else Hdf5MemoryHarness()
