"""Byte access to zarr objects on object storage for the fast chunk reader: obstore's synchronous
GETs; a shard's index by a HEAD (size, ETag) and one range request, its inner chunks by range
requests pinned to the version (ETag) the index came from.

A handle stands for one version of one object: the HEAD records its size and ETag, and every range
read carries ``If-Match: <etag>``, so a shard a writer replaced in between (a whole-object PUT)
fails its precondition instead of mixing versions: :class:`Replaced`, and the reader reads the new
index.  Handles are cached with the shard index, so a shard costs two requests once, then one per
inner chunk read.
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["ObjectFetcher", "Replaced"]


class Replaced(Exception):
    """The object behind a handle was replaced since its first read."""


class _Handle:
    __slots__ = ("key", "size", "etag", "retired")

    def __init__(self, key: str):
        self.key, self.size, self.etag, self.retired = key, None, None, False


class ObjectFetcher:
    """Reads of one obstore store (the ``store`` of zarr's ``ObjectStore``)."""

    def __init__(self, store: Any, cache: Any = None):
        import obstore

        self._ob, self._store = obstore, store
        self._count = itertools.count()
        self.requests = 0  # requests sent so far (the benchmarks report them per batch)
        #: a :class:`~replaybuf_zarr.object_cache.LocalObjectCache` serving ranges of whole objects, or None
        self.cache = cache

    def _sent(self) -> None:
        self.requests = next(self._count) + 1

    def get(self, key: str) -> bytes | None:
        """The whole object ``key``, or None when it is absent."""
        self._sent()
        try:
            return bytes(self._ob.get(self._store, key).bytes())
        except FileNotFoundError:
            return None

    def handle(self, key: str) -> _Handle | None:
        """A handle of the current version of ``key`` (one HEAD request), or None when it is absent."""
        h = _Handle(key)
        self._sent()
        try:
            meta = self._ob.head(self._store, key)
        except FileNotFoundError:
            return None
        h.size, h.etag = int(meta["size"]), meta.get("e_tag")
        return h

    def size(self, handle: _Handle) -> int:
        return int(handle.size)

    def read_tail(self, handle: _Handle, n: int) -> bytes:
        """The last ``n`` bytes of the handle's version of the object."""
        n = min(n, handle.size)
        return self.read_at(handle, handle.size - n, handle.size)

    def read_at(self, handle: _Handle, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the handle's version; :class:`Replaced` if it changed."""
        if stop <= start:
            return b""
        if self.cache is not None:
            return self.cache.read(handle.key, handle.etag, int(start), int(stop), lambda: self._whole(handle))
        return self._get(handle, (int(start), int(stop)))

    def _whole(self, handle: _Handle) -> bytes:
        """The whole object of the handle's version (one GET); :class:`Replaced` if it changed."""
        return self._get(handle, None)

    def _get(self, handle: _Handle, byte_range: tuple[int, int] | None) -> bytes:
        options: dict = {} if byte_range is None else {"range": byte_range}
        if handle.etag:
            options["if_match"] = handle.etag
        self._sent()
        try:
            return bytes(self._ob.get(self._store, handle.key, options=options).bytes())
        except (FileNotFoundError, self._ob.exceptions.PreconditionError):
            handle.retired = True
            raise Replaced(handle.key) from None
