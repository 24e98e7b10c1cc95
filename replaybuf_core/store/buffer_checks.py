"""Argument checks and the per-buffer mutex decorator shared by :class:`~replaybuf_core.ReplayBuffer`
and its parts (keys, episode arrays, episode indices)."""

from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np

from .recovery import is_temp_name


def _serialized(method):
    """Run a mutating method under the buffer's lock: threads writing through one buffer take
    turns (each call whole), instead of interleaving resizes and commits."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)

    return run


#: characters no key may hold: path separators of any platform (zarr, HDF5 and the file system
#: would read ``a\b`` as a path), and control characters
_BAD_KEY_CHARS = frozenset("/\\") | frozenset(chr(c) for c in range(32)) | {chr(127)}


#: names a store's own files use (zarr v3/v2 metadata, the writer lock): never keys
_RESERVED_KEYS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", ".replaybuf.lock"})
#: longest key (UTF-8 bytes): a file name holds 255, rechunk temp names add ``_temp_old.``
MAX_KEY_BYTES = 240


def _check_key(key: Any, what: str = "data key") -> None:
    if not isinstance(key, str):
        raise TypeError(f"{what} must be a str, got {type(key).__name__} {key!r}")
    if key == "" or key in (".", "..") or set(key) & _BAD_KEY_CHARS:
        raise ValueError(f"{what} {key!r} is invalid: keys must be non-empty, not '.'/'..', and hold "
                         "no '/', no backslash and no control character")
    if key in _RESERVED_KEYS:
        raise ValueError(f"{what} {key!r} is reserved: stores keep their own metadata under that name")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"{what} {key[:40]!r}... is {len(key.encode('utf-8'))} bytes long: keys hold at most "
                         f"{MAX_KEY_BYTES} (they become file names)")
    if is_temp_name(key):
        raise ValueError(f"{what} {key!r} is reserved for rechunk temp arrays ('_temp', '_temp.*', '_temp_old*')")


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
