"""Prove-and-convert of image values to uint8 in one pass (numba, GIL released)."""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _convert(x, out):  # pragma: no cover - compiled
    for i in range(x.size):
        v = x[i]
        if not (v >= 0 and v <= 255):  # NaN fails too
            return i
        u = np.uint8(v)
        if u != v or (v == 0 and math.copysign(1.0, v) < 0):  # a fraction, or -0.0
            return i
        out[i] = u
    return -1


def as_uint8_if_lossless(x: np.ndarray) -> tuple[np.ndarray | None, int]:
    """``(x as uint8, -1)`` when every value of ``x`` survives ``astype(uint8).astype(x.dtype)``
    bit for bit (integers in 0..255; no NaN, no -0.0); else ``(None, first offending row)``.

    Args:
        x: numeric array (T, ...), any dtype; uint8 passes through unchanged.
    One pass over ``x`` (the float32 → uint8 → float32 round trip it replaces made four).
    """
    if x.dtype == np.uint8:
        return x, -1
    if x.dtype.kind not in "iuf":
        return None, 0
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, dtype=np.uint8)
    bad = int(_convert(flat, out))
    if bad >= 0:
        row_size = max(1, x.size // max(1, len(x)))
        return None, bad // row_size
    return out.reshape(x.shape), -1
