"""A read-only store that presents only the committed content of a store needing recovery.

A read-only open must not touch the store, yet every read must see exactly what a writable open would
leave after :func:`~replaybuf_core.store.recovery.recover`: ``n_steps`` rows per data array, ``n_episodes``
entries of ``meta/episode_ends``, no rechunk temp arrays, and an array moved aside by an interrupted
rechunk under its own name.  :class:`RecoveredView` wraps the backend and does that; the
:class:`~replaybuf_core.ReplayBuffer` uses it only when the read-only store is not clean.

The native groups (``buffer.data`` / ``buffer.meta`` / ``buffer.root``) are the backend's, unfiltered.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.protocol import read_rows_via_ranges

from .commit import EPISODE_ENDS
from .recovery import RecoveryReport


class RowLimitedArray:
    """A read-only view of a native array (zarr, h5py...) showing only its first ``n_rows`` rows.

    Supports ``.shape``, ``.dtype``, ``.ndim``, ``len()``, ``np.asarray()`` and indexing whose first
    element is an int, a slice, an int array or ``...``; other attributes (``chunks``...) come from the
    wrapped array.  Assignment raises :class:`~replaybuf_core.errors.ReadOnlyError`.
    """

    def __init__(self, array: Any, n_rows: int, name: str = ""):
        self._array = array
        self._n = int(n_rows)
        self._name = name

    @property
    def shape(self) -> tuple[int, ...]:
        return (self._n,) + tuple(self._array.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    @property
    def ndim(self) -> int:
        return len(self._array.shape)

    def __len__(self) -> int:
        return self._n

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._array, attr)

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self[:])
        return out.astype(dtype) if dtype is not None else out

    def _first(self, k: Any) -> Any:
        n = self._n
        if k is Ellipsis:
            return slice(0, n)
        if isinstance(k, slice):
            return slice(*k.indices(n))
        if isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, (bool, np.bool_)):
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"row {i} is out of range for {self._name or 'the array'} of {n} rows")
            return i + n if i < 0 else i
        idx = np.asarray(k)
        if idx.dtype == bool:
            if idx.shape[:1] != (n,):
                raise IndexError(f"boolean index of length {idx.shape[:1]} for {n} rows")
            return np.flatnonzero(idx)
        if idx.dtype.kind in "iu":
            if idx.size and (idx.min() < -n or idx.max() >= n):
                raise IndexError(f"row index out of range for {self._name or 'the array'} of {n} rows")
            return np.where(idx < 0, idx + n, idx)
        raise TypeError(f"unsupported index {k!r}")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if not key:
                return self._array[: self._n]
            rest = key[1:]
            if key[0] is Ellipsis:
                return self._array[(slice(0, self._n),) + key]
            return self._array[(self._first(key[0]),) + rest]
        return self._array[self._first(key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ReadOnlyError(f"{self._name or 'this array'} belongs to a buffer opened read-only")

    def __repr__(self) -> str:
        return f"RowLimitedArray({self._name!r}, shape={self.shape}, dtype={self.dtype})"


class RecoveredView:
    """A :class:`~replaybuf_core.protocol.StorageBackend` over a read-only ``store`` that shows the
    committed state described by ``report`` (a :class:`~replaybuf_core.store.recovery.RecoveryReport` made
    with ``apply=False``).  Writes raise :class:`~replaybuf_core.errors.ReadOnlyError` (the wrapped
    store is read-only); verbs not listed here are the wrapped store's."""

    def __init__(self, store: Any, report: RecoveryReport):
        self._inner = store
        self._rep = report
        self._limits: dict[tuple[str, str], int] = {("meta", EPISODE_ENDS): report.n_episodes}
        for key in report.extra_rows:
            self._limits[("data", key)] = report.n_steps

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    @property
    def inner(self) -> Any:
        """The wrapped backend."""
        return self._inner

    @property
    def root(self) -> Any:
        return self._inner.root

    def _name(self, group: str, name: str) -> str:
        return self._rep.aliases.get((group, name), name)

    def list_arrays(self, group: str) -> list[str]:
        names = {n for n in self._inner.list_arrays(group) if (group, n) not in self._rep.hidden}
        names |= {n for (g, n) in self._rep.aliases if g == group}
        return sorted(names)

    def has_array(self, group: str, name: str) -> bool:
        if (group, name) in self._rep.hidden:
            return False
        return self._inner.has_array(group, self._name(group, name))

    def get_array(self, group: str, name: str) -> Any:
        if (group, name) in self._rep.hidden:
            raise KeyError(f"no array {group}/{name}")
        arr = self._inner.get_array(group, self._name(group, name))
        n = self._limits.get((group, name))
        return arr if n is None else RowLimitedArray(arr, n, f"{group}/{name}")

    def shape(self, group: str, name: str) -> tuple[int, ...]:
        shape = tuple(self._inner.shape(group, self._name(group, name)))
        n = self._limits.get((group, name))
        return shape if n is None else (n,) + shape[1:]

    def dtype(self, group: str, name: str) -> np.dtype:
        return self._inner.dtype(group, self._name(group, name))

    def chunks(self, group: str, name: str):
        return self._inner.chunks(group, self._name(group, name))

    def shards(self, group: str, name: str):
        return self._inner.shards(group, self._name(group, name))

    def codec(self, group: str, name: str):
        return self._inner.codec(group, self._name(group, name))

    def read(self, group: str, name: str, start: int, stop: int, step: int | None = None) -> np.ndarray:
        n = self._limits.get((group, name))
        if n is not None:
            stop = min(stop, n)
            start = min(start, stop)
        return self._inner.read(group, self._name(group, name), start, stop, step)

    def read_ranges(self, group: str, name: str, starts: Sequence[int], stops: Sequence[int]) -> list[np.ndarray]:
        n = self._limits.get((group, name))
        if n is not None and len(stops) and int(np.max(stops)) > n:
            raise IndexError(f"row ranges past the {n} committed rows of {group}/{name}")
        return self._inner.read_ranges(group, self._name(group, name), starts, stops)

    def read_rows(self, group: str, name: str, rows: np.ndarray, out: np.ndarray,
                  at: np.ndarray | None = None, convert: Any = None) -> np.ndarray:
        self._check_rows(group, name, rows)
        inner = getattr(self._inner, "read_rows", None)
        if inner is not None:
            return inner(group, self._name(group, name), rows, out, **_extra(at, convert))
        return read_rows_via_ranges(self, group, name, rows, out, at, convert)

    def read_rows_async(self, group: str, name: str, rows: np.ndarray, out: np.ndarray,
                        at: np.ndarray | None = None, convert: Any = None) -> Any:
        """The wrapped store's ``read_rows_async`` (``result()`` returns ``out``) of the committed
        rows under the array's recovered name; a completed read where it has none."""
        self._check_rows(group, name, rows)
        inner = getattr(self._inner, "read_rows_async", None)
        if inner is None:
            from concurrent.futures import Future

            done: Future = Future()
            done.set_result(self.read_rows(group, name, rows, out, at, convert))
            return done
        return inner(group, self._name(group, name), rows, out, **_extra(at, convert))

    def _check_rows(self, group: str, name: str, rows: np.ndarray) -> None:
        n = self._limits.get((group, name))
        if n is not None and np.size(rows) and int(np.max(rows)) >= n:
            raise IndexError(f"rows past the {n} committed rows of {group}/{name}")

    def pin(self, group: str, name: str) -> bool:
        pin = getattr(self._inner, "pin", None)
        return bool(pin(group, self._name(group, name))) if pin is not None else False

    def pinned(self, group: str, name: str) -> np.ndarray | None:
        pinned = getattr(self._inner, "pinned", None)
        memory = pinned(group, self._name(group, name)) if pinned is not None else None
        n = self._limits.get((group, name))
        return memory if memory is None or n is None else memory[:n]


def _extra(at: Any, convert: Any) -> dict[str, Any]:
    """The optional arguments of a row read that were given (a backend without ``"rows_at"`` /
    ``"rows_convert"`` is never handed them)."""
    return {k: v for k, v in (("at", at), ("convert", convert)) if v is not None}
