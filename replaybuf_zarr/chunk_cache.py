"""A byte-bounded LRU of decoded chunks, shared by the chunk readers of one zarr backend."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

DEFAULT_CACHE_BYTES = 256 * 2**20


class ChunkCache:
    """Least-recently-used cache of decoded chunks (ndarrays), bounded by their total ``nbytes``.

    Args:
        max_bytes: capacity in bytes (default 256 MiB); 0 disables caching.  A chunk larger than the
            capacity is never cached.

    Thread-safe (one lock); values are returned as stored — callers must not modify them.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES):
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._bytes = 0
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0

    @property
    def max_bytes(self) -> int:
        return self._max

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"cache size must be an int >= 0 (bytes), got {value!r}")
        self._max = int(value)
        with self._lock:
            self._evict()

    @property
    def nbytes(self) -> int:
        """Bytes currently held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable) -> np.ndarray | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: np.ndarray) -> None:
        n = value.nbytes
        if n > self._max:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._data[key] = value
            self._bytes += n
            self._evict()

    def discard(self, key: Hashable) -> None:
        """Drop one entry (no error when absent)."""
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes

    def discard_prefix(self, prefix: Hashable) -> None:
        """Drop every entry whose key is a tuple starting with ``prefix`` (one array's chunks)."""
        with self._lock:
            for key in [k for k in self._data if isinstance(k, tuple) and k[0] == prefix]:
                self._bytes -= self._data.pop(key).nbytes

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def _evict(self) -> None:
        while self._bytes > self._max and self._data:
            _, value = self._data.popitem(last=False)
            self._bytes -= value.nbytes
