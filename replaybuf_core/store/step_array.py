"""``rb[key]``: a data array that indexes like NumPy through the backend's own read path.

Code written against diffusion_policy's ``ReplayBuffer`` slices ``rb[key][a:b]`` once per item (its
``SequenceSampler.sample_sequence``).  Handing out the native array (zarr-python's) made each such
slice a zarr-python read: ~10 ms an item against 0.14 ms for diffusion_policy's in-memory buffer.
A :class:`StepArray` sends the slice to the backend's ``read`` (zarr: the chunk reader with its
cache of decoded chunks), and once :meth:`~replaybuf_core.ReplayBuffer.warm` loaded the key
(the optional backend verb ``pinned``), indexes the in-memory copy directly.

Everything else — attributes such as ``chunks``, ``attrs``, ``compressors``, ``info`` — is the native
array's.  In-memory backends (numpy) keep handing out their ``np.ndarray`` itself.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..layout.frames import is_frames
from .buffer_dtypes import check_dtypes


__all__ = ["StepArray"]


class StepArray:
    """Data key ``key`` of ``buffer``: ``shape``, ``dtype``, ``ndim``, ``len()``, ``np.asarray()`` and
    NumPy indexing whose first element (steps) is an int, a slice, an int or bool array or ``...``;
    the other elements index each step as NumPy does.

    Reads return new arrays (in :attr:`dtype`: the source's dtype for a key an import stored in
    another, see :mod:`replaybuf_core.store.buffer_dtypes`; string keys: ``object`` arrays of ``str``), except
    after ``warm``: then they are read-only views of the in-memory copy, as fast as NumPy's (copy one
    before writing to it; a key stored in another dtype than its source's is copied into the source
    dtype once, at its first read after ``warm``: :func:`_source_copy`).  Assignment ``a[i] = v`` / ``a[i:j] = v`` / ``a[i:j, ...] = v`` writes the
    rows through the backend (its caches stay right; the key's stored statistics are forgotten first,
    recomputed on the next ``get_stats``); other index forms raise TypeError.

    Raises:
        IndexError: a step index out of range (naming the key and the number of steps).
        TypeError: an unsupported index (a float, a string...).
        ReadOnlyError: assignment on a buffer opened read-only.
    """

    __slots__ = ("_rb", "_key", "_dtypes", "_dtype")

    def __init__(self, buffer: Any, key: str, dtypes: str = "source"):
        self._rb = buffer
        self._key = key
        self._dtypes = dtypes if dtypes == "source" else check_dtypes(dtypes)
        self._dtype: np.dtype | None = None  # a key's dtype never changes: looked up once

    # -- what the array is ----------------------------------------------------------------------
    @property
    def native(self) -> Any:
        """The backend's own array object (a ``zarr.Array`` for zarr)."""
        return self._rb._store.get_array("data", self._key)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._rb._store.shape("data", self._key))

    @property
    def dtype(self) -> np.dtype:
        """The dtype reads return: the source's for a key an import converted (``stored_dtype``: as
        stored), see :mod:`replaybuf_core.store.buffer_dtypes`."""
        if self._dtype is None:  # per-item code asks every item: looked up once per native array
            native = self.native
            held = self._rb._read_dtypes.get((self._key, self._dtypes))
            if held is None or held[0] is not native:
                held = self._rb._read_dtypes[self._key, self._dtypes] = (native, self._rb.dtype_of(self._key, self._dtypes))
            self._dtype = held[1]
        return self._dtype

    @property
    def stored_dtype(self) -> np.dtype:
        return np.dtype(self._rb._store.dtype("data", self._key))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        return self.shape[0]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        native = self.native
        try:
            return getattr(native, attr)
        except AttributeError:
            raise AttributeError(
                f"rb[{self._key!r}] (a StepArray: the key is read lazily, through the chunk reader) has no attribute "
                f"{attr!r}, nor has its native {type(native).__name__}; np.asarray(rb[{self._key!r}]) reads it whole "
                f"as an np.ndarray, and after rb.warm([{self._key!r}]) rb[{self._key!r}] on a read-only buffer is "
                f"one") from None

    def __repr__(self) -> str:
        return f"StepArray({self._key!r}, shape={self.shape}, dtype={self.dtype})"

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out.astype(dtype) if dtype is not None and out.dtype != dtype else out

    # -- reading --------------------------------------------------------------------------------
    def _pinned(self) -> np.ndarray | None:
        pinned = getattr(self._rb._store, "pinned", None)
        return pinned("data", self._key) if pinned is not None else None

    def __getitem__(self, index: Any) -> Any:
        pinned = getattr(self._rb._store, "pinned", None)
        memory = pinned("data", self._key) if pinned is not None else None
        if memory is not None:
            if self._dtypes == "source":
                ready = _source_copy(self._rb, self._key, memory)
                if ready is not None:  # already in the dtype reads give
                    return ready[index]
            return self._rb._as_read(self._key, memory[index], self._dtypes)
        self._rb._source_copies.pop(self._key, None)  # the key's in-memory copy was dropped (a write)
        return self._rb._as_read(self._key, self._read(index), self._dtypes)

    def _read(self, index: Any) -> Any:
        first, rest = _split(index)
        n = self.shape[0]
        if _is_int(first):
            i = self._check_row(int(first), n)
            row = self._rb._store.read("data", self._key, i, i + 1)[0]
            return row[rest] if rest else row
        if isinstance(first, slice) and first.step in (None, 1):
            a, b, _ = first.indices(n)
            out = self._rb._store.read("data", self._key, a, max(a, b))
        elif isinstance(first, slice):  # other steps: only the rows named are read
            out = self._rb.read_rows(self._key, np.arange(n)[first])
        else:
            out = self._rb.read_rows(self._key, self._rows(first, n))
        return out[(slice(None),) + rest] if rest else out

    def _check_row(self, i: int, n: int) -> int:
        if not -n <= i < n:
            raise IndexError(f"step {i} is out of range for data key {self._key!r} of {n} steps")
        return i + n if i < 0 else i

    def _rows(self, first: Any, n: int) -> np.ndarray:
        idx = np.asarray(first)
        if idx.dtype == bool:
            if idx.shape[:1] != (n,) or idx.ndim != 1:
                raise IndexError(f"boolean index of shape {idx.shape} for data key {self._key!r} of {n} steps")
            return np.flatnonzero(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"data key {self._key!r}: steps are indexed by int, slice, int or bool arrays, "
                            f"got {first!r}")
        if idx.size and (idx.min() < -n or idx.max() >= n):
            bad = idx[(idx < -n) | (idx >= n)].flat[0]
            raise IndexError(f"step {bad} is out of range for data key {self._key!r} of {n} steps")
        return np.where(idx < 0, idx + n, idx).astype(np.int64)

    # -- writing --------------------------------------------------------------------------------
    def __setitem__(self, index: Any, value: Any) -> None:
        self._rb._require_writable()
        first, rest = _split(index)
        n = self.shape[0]
        if _is_int(first):
            a = self._check_row(int(first), n)
            b = a + 1
        elif isinstance(first, slice) and first.step in (None, 1):
            a, b, _ = first.indices(n)
            b = max(a, b)
        else:
            raise TypeError(f"data key {self._key!r}: assign to steps by an int or a slice of step 1, got {first!r}")
        if b == a:
            return
        block = self._rb._store.read("data", self._key, a, b)
        if not block.flags.writeable:
            block = block.copy()
        block[((0,) if _is_int(first) else (slice(None),)) + rest] = self._rb._as_stored(self._key, value, block.dtype)
        from .stored_stats import forget_stats

        with self._rb._mutex:
            forget_stats(self._rb, self._key)  # first: statistics of the old rows are never served after
            self._rb._store.write("data", self._key, a, block)


#: a small numeric key handed out by ``rb[key]`` on a read-only buffer is loaded into memory when its
#: decoded size is at most this many bytes ...
AUTO_PIN_KEY_BYTES = 16 << 20
#: ... and the keys loaded so hold at most this many bytes in all (per buffer)
AUTO_PIN_TOTAL_BYTES = 128 << 20


def _auto_pin(rb: Any, key: str) -> bool:
    """Load the small numeric key ``key`` of a read-only buffer into memory (as
    :meth:`~replaybuf_core.ReplayBuffer.warm` does).  Per-item code (diffusion_policy's sampler:
    ``rb[key][a:b]`` per key per item) would pay the chunk reader's fixed cost on every slice, and
    diffusion_policy's normaliser takes ``rb[key]`` whole and needs an ``np.ndarray``; for a key of
    states or actions — kilobytes to megabytes — memory is what diffusion_policy's own
    ``copy_from_path`` buffer holds too.  Only keys of at most :data:`AUTO_PIN_KEY_BYTES` decoded
    bytes, within a budget of :data:`AUTO_PIN_TOTAL_BYTES` per buffer, on a backend that can ``pin``;
    camera frames (:func:`~replaybuf_core.layout.frames.is_frames`) stay with the chunk reader and its
    cache, whatever their size (a damaged chunk then fails only the reads that touch it).  Read-only only: a writable buffer's writes
    would drop the copy again.  True when it pinned."""
    store = rb._store
    pin = getattr(store, "pin", None)
    if pin is None or not store.read_only or key in rb._auto_pin_refused:
        return False
    shape = tuple(store.shape("data", key))
    dtype = np.dtype(store.dtype("data", key))
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    used = rb._auto_pinned_bytes
    if dtype.kind not in "biuf" or is_frames(shape, dtype) or nbytes > AUTO_PIN_KEY_BYTES \
            or used + nbytes > AUTO_PIN_TOTAL_BYTES:
        rb._auto_pin_refused.add(key)  # asked once: the answer does not change for a read-only buffer
        return False
    with rb._mutex:
        if not pin("data", key):
            return False
    rb._auto_pinned_bytes = used + nbytes
    return True


def in_memory(rb: Any, key: str) -> np.ndarray | None:
    """Data key ``key`` of the read-only buffer ``rb`` as a read-only in-memory ``np.ndarray`` in the
    dtype reads give (the source's), when it is in memory — warmed, or small enough to load now
    (:func:`_auto_pin`) — else None (the caller hands out a :class:`StepArray`)."""
    pinned = getattr(rb._store, "pinned", None)
    if pinned is None:
        return None
    memory = pinned("data", key)
    if memory is None and _auto_pin(rb, key):
        memory = pinned("data", key)
    if memory is None:
        return None
    return _source_copy(rb, key, memory)


#: bytes of source-dtype copies of warmed keys a buffer holds at most (:func:`_source_copy`)
SOURCE_COPY_BYTES = 4 << 30


def _source_copy(rb: Any, key: str, memory: np.ndarray) -> np.ndarray | None:
    """The in-memory copy ``memory`` of key ``key`` (stored dtype) in the key's source dtype, for
    ``rb[key]`` reads: a key an import stored in a smaller dtype (Push-T's float32 frames as uint8)
    would otherwise be cast on every slice — per item in diffusion_policy's sampler, ~10 % of an
    item's time.  Built once, at the first ``rb[key]`` read after ``warm``, read-only, and held
    beside the stored-dtype copy (which the samplers read) — the memory diffusion_policy's own
    ``copy_from_path`` buffer holds; at most :data:`SOURCE_COPY_BYTES` a buffer (beyond that slices
    are cast as before: None).  ``memory`` itself when the dtypes agree."""
    held = rb._source_copies.get(key)
    if held is not None and held[0]() is memory:
        return held[1]
    dt = rb.source_dtypes.get(key)
    if dt is None or memory.dtype == dt:
        return memory
    nbytes = memory.size * np.dtype(dt).itemsize
    others = sum(c.nbytes for k, (_, c) in rb._source_copies.items() if k != key)
    if others + nbytes > SOURCE_COPY_BYTES:
        return None
    import weakref

    with rb._mutex:
        copy = memory.astype(dt)
        copy.flags.writeable = False
        rb._source_copies[key] = (weakref.ref(memory), copy)  # stale once the key is pinned anew
    return copy


def _is_int(k: Any) -> bool:
    return isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, (bool, np.bool_))


def _split(index: Any) -> tuple[Any, tuple]:
    """(the steps index, the rest as a tuple) of a NumPy index."""
    if isinstance(index, tuple):
        if not index:
            return slice(None), ()
        if index[0] is Ellipsis:
            return slice(None), ((Ellipsis,) + index[1:] if len(index) > 1 else ())
        return index[0], tuple(index[1:])
    if index is Ellipsis:
        return slice(None), ()
    return index, ()
