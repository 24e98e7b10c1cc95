"""Synchronous byte access to one zarr store for the chunk reader: whole objects and byte ranges of
files (through the process-wide descriptor pool), of a ``MemoryStore``'s dict, or of object-storage
objects (range requests pinned to an ETag)."""

from __future__ import annotations

import itertools
import os
from typing import Any

from .file_pool import FILES
from .object_reads import ObjectFetcher
from .zarr_compat import memory_store_dict


class Fetcher:
    """Synchronous byte access to one store: whole objects and byte ranges (files through the
    process-wide :data:`~replaybuf_zarr.file_pool.FILES` pool, a ``MemoryStore`` through its dict, an
    ``ObjectStore`` through obstore's range requests: :mod:`.object_reads`).

    :meth:`handle` gives an *acquired* handle (a file handle, or a memory buffer); read through it
    with :meth:`read_at` / :meth:`read_tail` / :meth:`size` and give it back with :meth:`done`;
    :meth:`reuse` acquires a kept handle again (False: it was retired, fetch a new one)."""

    _owners = itertools.count()

    def __init__(self, store: Any):
        from zarr.storage import LocalStore, MemoryStore

        self._owner = next(self._owners)
        if isinstance(store, LocalStore):
            self.kind = "local"
            self.root = str(store.root)
        elif isinstance(store, MemoryStore) and memory_store_dict(store) is not None:
            self.kind = "memory"
            self.mapping = memory_store_dict(store)
        elif type(store).__name__ == "ObjectStore" and hasattr(store, "store"):  # zarr's, over obstore
            self.kind = "object"
            self.objects = ObjectFetcher(store.store, getattr(store, "replaybuf_local_cache", None))
        else:
            raise TypeError("unsupported store")

    def close(self) -> None:
        """Let go of this reader's open files (closed once no read uses them)."""
        if self.kind == "local":
            FILES.release_all(owner=self._owner)

    def __del__(self) -> None:
        # no lock here: the garbage collector may run this inside the file pool's lock (FILES.open
        # allocating), in the same thread — a lock taken here hung the test suite for ever
        try:
            if getattr(self, "kind", None) == "local":
                FILES.release_later(self._owner)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def forget(self, key: str) -> None:
        """Drop the descriptor of ``key`` (its file was replaced: the old one reads the old bytes)."""
        if self.kind == "local":
            FILES.forget(f"{self.root}/{key}")

    def get(self, key: str) -> bytes | None:
        """The whole object ``key``, or None when it is absent."""
        if self.kind == "object":
            return self.objects.get(key)
        if self.kind == "local":
            h = FILES.open(self._owner, f"{self.root}/{key}")
            if h is None:
                return None
            try:
                return os.pread(h.fd, os.fstat(h.fd).st_size, 0)
            finally:
                FILES.release(h)
        buf = self.mapping.get(key)
        return None if buf is None else buf.to_bytes()

    def handle(self, key: str) -> Any:
        """One version of object ``key``, acquired (give it back with :meth:`done`): a file handle or
        a memory buffer; None if absent.  Reads through one handle see one version even while a
        writer replaces the object."""
        if self.kind == "object":
            return self.objects.handle(key)
        return FILES.open(self._owner, f"{self.root}/{key}") if self.kind == "local" else self.mapping.get(key)

    def reuse(self, handle: Any) -> bool:
        """Acquire a kept :meth:`handle` for one more read; False when it was retired meanwhile."""
        if self.kind == "object":
            return not handle.retired
        return FILES.acquire(handle) if self.kind == "local" else True

    def done(self, handle: Any) -> None:
        """A read through ``handle`` is finished."""
        if self.kind == "local":
            FILES.release(handle)

    def size(self, handle: Any) -> int:
        """Bytes in the object behind a :meth:`handle`."""
        if self.kind == "object":
            return self.objects.size(handle)
        return os.fstat(handle.fd).st_size if self.kind == "local" else len(handle.as_numpy_array())

    def read_tail(self, handle: Any, n: int) -> bytes:
        """The last ``n`` bytes (fewer if the object is shorter) of a :meth:`handle`."""
        if self.kind == "object":
            return self.objects.read_tail(handle, n)
        if self.kind == "local":
            size = os.fstat(handle.fd).st_size
            return os.pread(handle.fd, min(n, size), max(0, size - n))
        return handle.as_numpy_array()[-n:].tobytes()

    def read_at(self, handle: Any, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a :meth:`handle` (object stores: :class:`~replaybuf_zarr.object_reads.Replaced` when the
        object was replaced since the handle first read it)."""
        if self.kind == "object":
            return self.objects.read_at(handle, start, stop)
        if self.kind == "local":
            return os.pread(handle.fd, stop - start, start)
        return handle.as_numpy_array()[start:stop].tobytes()
