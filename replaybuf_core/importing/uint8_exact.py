"""Prove-and-convert of image values to uint8: one pass over the data, in cache-sized blocks."""

from __future__ import annotations

import numpy as np

#: Elements per block: the block, its uint8 cast and its cast back stay in the CPU cache.
BLOCK = 65536

_UINT_OF_SIZE = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def as_uint8_if_lossless(x: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray | None, int]:
    """``(x as uint8, -1)`` when every value of ``x`` is an integer in 0..255 that survives
    ``astype(uint8).astype(x.dtype)`` bit for bit (so no NaN, no -0.0); else
    ``(None, first offending row)``.

    Args:
        x: numeric array (T, ...), any integer or float dtype; uint8 passes through unchanged.
        out: optional uint8 array of ``x.size`` elements to write the result into (else allocated).
    Floats are checked block by block (:data:`BLOCK` elements): cast to uint8, cast back, and the
    bits compared with the source's — any value that is not such an integer (a fraction, out of
    range, NaN, ±inf, -0.0) cannot come back with the same bits, whatever the cast made of it.
    Integers are checked by range.  About 0.5 ns an element here (2.8 GB of float32 in ~0.35 s),
    with no compilation step.
    """
    if x.dtype == np.uint8:
        return x, -1
    if x.dtype.kind not in "iuf":
        return None, 0
    row_size = max(1, x.size // max(1, len(x))) if x.ndim else 1
    flat = np.ascontiguousarray(x).reshape(-1)
    if out is None:
        out = np.empty(flat.size, dtype=np.uint8)
    out = out.reshape(-1)
    if flat.dtype.kind in "iu":
        bad = np.flatnonzero((flat < 0) | (flat > 255)) if flat.size else ()
        if len(bad):
            return None, int(bad[0]) // row_size
        np.copyto(out, flat, casting="unsafe")
        return out.reshape(x.shape), -1
    native = flat.dtype.newbyteorder("=")
    if native != flat.dtype:
        flat = flat.astype(native)
    uint = _UINT_OF_SIZE[native.itemsize]
    n = flat.size
    back = np.empty(min(n, BLOCK), dtype=native)
    differs = np.empty(min(n, BLOCK), dtype=bool)
    src_bits, back_bits = flat.view(uint), back.view(uint)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN / out-of-range casts: caught below
        for s in range(0, n, BLOCK):
            e = min(n, s + BLOCK)
            m = e - s
            np.copyto(out[s:e], flat[s:e], casting="unsafe")
            np.copyto(back[:m], out[s:e])
            np.not_equal(back_bits[:m], src_bits[s:e], out=differs[:m])
            if differs[:m].any():
                return None, (s + int(np.argmax(differs[:m]))) // row_size
    return out.reshape(x.shape), -1


def first_bad_value(x: np.ndarray):
    """The first element of ``x`` (one row) that is not exactly a uint8 value, as a Python scalar
    (None when there is none): what an import's message shows."""
    r = np.ascontiguousarray(x).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        back = r.astype(np.uint8).astype(r.dtype)
    bad = np.flatnonzero((back.view(np.uint8).reshape(len(r), -1) != r.view(np.uint8).reshape(len(r), -1)).any(axis=1))
    return r[bad[0]].item() if bad.size else None
