"""Argument checks and the per-buffer mutex decorator shared by :class:`~replaybuf_core.ReplayBuffer`
and its parts (keys, episode arrays, episode indices)."""

from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np


def _serialized(method):
    """Run a mutating method under the buffer's lock: threads writing through one buffer take
    turns (each call whole), instead of interleaving resizes and commits."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)

    return run


def _as_episode_array(key: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        raise ValueError(f"data key {key!r}: a 0-d value has no time axis; pass an array of shape (T, ...)")
    if arr.dtype == object:
        if not all(isinstance(v, str) for v in arr.flat):
            bad = next(v for v in arr.flat if not isinstance(v, str))
            raise TypeError(f"data key {key!r}: object arrays may hold only str, found {type(bad).__name__}")
    elif arr.dtype.kind == "U":
        arr = arr.astype(object)
    elif arr.dtype.kind not in "biufc":
        raise TypeError(f"data key {key!r}: unsupported dtype {arr.dtype}")
    return arr


def _check_index(idx: Any, n: int, what: str = "episode") -> int:
    if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, (numbers.Integral, np.integer)):
        raise TypeError(f"{what} index must be an int, got {type(idx).__name__} {idx!r}")
    i = int(idx)
    if not -n <= i < n:
        raise IndexError(f"{what} index {i} is out of range for a buffer of {n} episodes")
    return i + n if i < 0 else i
