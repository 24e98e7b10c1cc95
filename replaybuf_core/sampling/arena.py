"""Output arrays reused from batch to batch once nobody holds them.

A training batch of natural camera frames is large: 64 samples of two 640×480 frames are 118 MB of
uint8 and 472 MB of float32.  A new array for every batch is new memory, and the kernel faults in
every page of it (measured on these VMs: ~13 µs a 4 KiB page, about half of a reader's CPU time).
:class:`OutputArena` hands out arrays from a few slots per shape and dtype and gives a slot out
again only when *nothing else refers to its array*: no view of it, no tensor made with
``torch.from_numpy`` (the tensor's storage holds the array), no batch the caller kept — CPython's
reference count says so exactly (``sys.getrefcount``).  A batch the training loop still holds is
never written over; while every slot is held, arrays are simply new.

Thread-safe; each process has its own (a forked child's inherited arrays are copy-on-write pages,
reused by the child like its own).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

__all__ = ["OutputArena", "ARENA_MIN_BYTES", "ARENA_SLOTS"]

#: arrays smaller than this are always new (a fresh small array costs nothing worth saving)
ARENA_MIN_BYTES = 1 << 20
#: arrays kept per (shape, dtype): the batch being built, the one the caller holds, one spare
ARENA_SLOTS = 3
#: references to a slot's array while it is tested: the slot list's, the loop variable's and
#: ``sys.getrefcount``'s own argument
_FREE_REFS = 3


class OutputArena:
    """Reusable ``np.empty`` for batch outputs (see the module docstring).

    Args:
        slots: arrays kept per (shape, dtype), >= 1.
        min_bytes: arrays of fewer bytes are not kept.
    """

    def __init__(self, slots: int = ARENA_SLOTS, min_bytes: int = ARENA_MIN_BYTES):
        if int(slots) < 1:
            raise ValueError(f"an arena needs at least one slot, got {slots}")
        self.slots, self.min_bytes = int(slots), int(min_bytes)
        self._kept: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype``, like ``np.empty``: a kept
        array nobody else refers to any more, or a new one (kept when a slot is free)."""
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize < self.min_bytes:
            return np.empty(shape, dtype=dtype)
        key = (shape, dtype.str)
        with self._lock:
            kept = self._kept.setdefault(key, [])
            for arr in kept:
                if sys.getrefcount(arr) == _FREE_REFS:
                    return arr
            arr = np.empty(shape, dtype=dtype)
            if len(kept) < self.slots:
                kept.append(arr)
            return arr

    def __getstate__(self) -> dict:  # pickled (to a spawned worker) empty: arrays and lock are per process
        return {"slots": self.slots, "min_bytes": self.min_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["slots"], state["min_bytes"])

    def clear(self) -> None:
        """Forget every kept array (the memory is freed once their holders drop them)."""
        with self._lock:
            self._kept.clear()

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays kept."""
        with self._lock:
            return sum(a.nbytes for kept in self._kept.values() for a in kept)
