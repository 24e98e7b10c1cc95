"""Camera frames converted to a training format where they are read: uint8 ``(H, W, C)`` to
channels-first ``(C, H, W)`` and/or float32 in [0, 1] — LeRobot's sample format (``x.float() / 255``).

The conversion of a batch of natural frames is, after decoding, most of a reader's work (two
640×480 frames a sample: 1.8 M values, 7.4 MB of float32).  It is one compiled pass a frame (numba,
cached on disk): each output channel row is written from the interleaved source row through a
256-entry table of ``float32(i) / float32(255)`` — exactly the quotient NumPy's and torch's float32
division give, no multiply-by-reciprocal rounding.

A :class:`FrameConversion` handed to a read (``ReplayBuffer.read_rows(convert=)``, a sampler's
``sample_batch(convert=)``) is applied by the backend to each frame as soon as it is decoded, while
it is still in the CPU's cache, straight into the batch (backends with the ``"rows_convert"``
capability: the zarr backend); elsewhere the frames are gathered as uint8 first and converted after
(:func:`convert_rows`).  Either way the values are the same, bit for bit.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybuf_core.compiled import numba

__all__ = ["FrameConversion", "FLOAT_OF_UINT8", "PARALLEL_VALUES", "take_converted", "convert_rows",
           "convert_frames", "conversion_pool", "warm_kernels"]

#: ``float32(i) / float32(255)`` for every uint8 ``i``: the value a float32 division gives
FLOAT_OF_UINT8 = np.arange(256, dtype=np.float32) / np.float32(255)
FLOAT_OF_UINT8.flags.writeable = False

#: conversions of at least this many values run on one slab per core
PARALLEL_VALUES = 1 << 22
_POOL: tuple[int, ThreadPoolExecutor] | None = None


@dataclass(frozen=True)
class FrameConversion:
    """How camera frames (uint8 ``(..., H, W, C)``) are delivered: ``channels_first`` gives
    ``(..., C, H, W)``; ``to_float`` gives float32 ``x / 255`` (bit for bit torch's
    ``x.float() / 255``), else uint8."""

    channels_first: bool
    to_float: bool

    @property
    def dtype(self) -> np.dtype:
        """float32 with ``to_float``, else uint8."""
        return np.dtype(np.float32 if self.to_float else np.uint8)

    def step_shape(self, frame_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The converted shape of one frame of stored shape ``(H, W, C)``."""
        h, w, c = frame_shape
        return (c, h, w) if self.channels_first else (h, w, c)

    def take(self, src: np.ndarray, rows: np.ndarray, out: np.ndarray, at: np.ndarray) -> None:
        """``out[at[i]] = convert(src[rows[i]])`` on the calling thread (see :func:`take_converted`; a
        decoding thread converts what it decoded).  The reader's own places are in range by
        construction, so a float conversion of frames as decoded (C-contiguous uint8 ``(N, H, W, C)``,
        int64 ``rows``/``at``) goes straight to the kernel: the checks cost ~45 µs a frame."""
        if (self.to_float and src.dtype == np.uint8 and src.ndim == 4 and src.flags.c_contiguous
                and rows.dtype == at.dtype == np.int64 and rows.flags.c_contiguous and at.flags.c_contiguous):
            (_take_chw_float if self.channels_first else _take_hwc_float)(src, rows, at, out, FLOAT_OF_UINT8)
            return
        take_converted(src, rows, out, at, self.channels_first, self.to_float, parallel=False)

    def convert_rows(self, frames: np.ndarray, out: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
        """Frames gathered as uint8 converted into ``out`` (see :func:`convert_rows`)."""
        return convert_rows(frames, out, self, at)


def conversion_pool() -> ThreadPoolExecutor:
    """This process's conversion threads (a new pool after a fork: threads do not survive it)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="replaybuf-float"))
    return _POOL[1]


def take_converted(src: np.ndarray, rows: np.ndarray, out: np.ndarray, at: np.ndarray, channels_first: bool,
                   to_float: bool, parallel: bool = True) -> None:
    """``out[at[i]] = convert(src[rows[i]])``: frames gathered and converted in one pass (no gathered
    uint8 batch in between), on one slab per core when many (and ``parallel``; else on the calling
    thread).

    ``src``: uint8 ``(N, H, W, C)`` frames, C-contiguous; ``rows``, ``at``: int64 ``(M,)`` — which
    frame of ``src``, and where in ``out`` (``(K, C, H, W)`` with ``channels_first`` else
    ``(K, H, W, C)``; float32 ``x / 255`` bit for bit with ``to_float``, else uint8).

    Raises:
        ValueError: ``src`` is not uint8 ``(N, H, W, C)``; ``rows`` outside ``src`` or ``at`` outside
            ``out``.
    """
    if src.dtype != np.uint8 or src.ndim != 4 or not src.flags.c_contiguous:
        raise ValueError(f"take_converted: frames must be C-contiguous uint8 (N, H, W, C), got {src.dtype} {src.shape}")
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    at = np.ascontiguousarray(at, dtype=np.int64)
    if rows.shape != at.shape or rows.ndim != 1:
        raise ValueError(f"take_converted: rows {rows.shape} and at {at.shape} must be one-dimensional and alike")
    if rows.size and (rows.min() < 0 or rows.max() >= len(src) or at.min() < 0 or at.max() >= len(out)):
        raise ValueError(f"take_converted: rows outside the {len(src)} frames or places outside the {len(out)} outputs")
    if not to_float:
        for r, i in zip(rows.tolist(), at.tolist()):
            np.copyto(out[i], np.moveaxis(src[r], -1, 0) if channels_first else src[r])
        return
    kernel = _take_chw_float if channels_first else _take_hwc_float
    n = min(os.cpu_count() or 1, rows.size) if parallel else 1
    if n < 2 or rows.size * int(np.prod(src.shape[1:])) < PARALLEL_VALUES:
        kernel(src, rows, at, out, FLOAT_OF_UINT8)
        return
    bounds = np.linspace(0, rows.size, n + 1).astype(int)
    futures = [conversion_pool().submit(kernel, src, rows[a:b], at[a:b], out, FLOAT_OF_UINT8)
               for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def convert_rows(frames: np.ndarray, out: np.ndarray, conversion: FrameConversion, at: np.ndarray | None = None) -> np.ndarray:
    """Frames gathered as uint8 (``rows_shape + (H, W, C)``) converted into ``out``
    (``rows_shape + step_shape``, or with ``at`` ``(m,) + rows_shape[1:] + step_shape``: row ``i``
    to ``out[at[i]]``); returns ``out``.  The path of reads whose backend cannot convert as it
    decodes.  Raises ValueError when ``out`` is not C-contiguous."""
    if not out.flags.c_contiguous:
        raise ValueError(f"converted frames go to a C-contiguous array; out {out.dtype} {out.shape} is not")
    step = frames.shape[-3:]
    lead = frames.shape[:-3]
    src = np.ascontiguousarray(frames).reshape((-1,) + step)
    flat = out.reshape((-1,) + out.shape[out.ndim - 3:])
    places = np.arange(src.shape[0], dtype=np.int64)
    if at is not None:  # row i of the first axis to out[at[i]]; the rest of each row in order
        inner = int(np.prod(lead[1:], dtype=np.int64))
        places = (np.asarray(at, dtype=np.int64)[:, None] * inner + np.arange(inner)).reshape(-1)
    take_converted(src, np.arange(src.shape[0], dtype=np.int64), flat, places, conversion.channels_first,
                   conversion.to_float)
    return out


def convert_frames(frames: np.ndarray, outs: np.ndarray, channels_first: bool, to_float: bool) -> None:
    """``outs[i] = convert(frames[i])`` for every frame, on the calling thread: ``frames`` C-contiguous
    uint8 ``(N, H, W, C)``, ``outs`` ``(N, C, H, W)`` / ``(N, H, W, C)`` (float32 with ``to_float``)."""
    if not to_float:  # channels first, uint8
        np.copyto(outs, np.moveaxis(frames, -1, -3))
    else:  # every frame to its own place: the gathering kernels with rows = places = 0..n-1
        every = np.arange(len(frames), dtype=np.int64)
        (_take_chw_float if channels_first else _take_hwc_float)(frames, every, every, outs, FLOAT_OF_UINT8)


def warm_kernels() -> None:
    """Load the compiled conversion kernels in this process now (numba's first call of a cached
    kernel starts its compiler, ~0.2–0.5 s)."""
    frame, out = np.zeros((1, 1, 1, 3), np.uint8), np.empty((1, 3, 1, 1), np.float32)
    zero = np.zeros(1, np.int64)
    cached = frame.copy()
    cached.flags.writeable = False  # a decoded chunk from the reader's cache: numba's read-only variant
    for src in (frame, cached):
        _take_chw_float(src, zero, zero, out, FLOAT_OF_UINT8)
        _take_hwc_float(src, zero, zero, out.reshape(1, 1, 1, 3), FLOAT_OF_UINT8)


@numba.njit(nogil=True, cache=True)
def _take_chw_float(frames, rows, at, outs, table):  # pragma: no cover - compiled
    """``outs[at[i], c, h, w] = table[frames[rows[i], h, w, c]]``, one image row at a time (its
    channels' output rows written in turn while the source row is in cache: 0.32 against 0.37 ms a
    640×480 frame for plane after plane, one thread)."""
    _, height, width, channels = frames.shape
    for i in range(rows.shape[0]):
        r, o = rows[i], at[i]
        for h in range(height):
            for c in range(channels):
                for w in range(width):
                    outs[o, c, h, w] = table[frames[r, h, w, c]]


@numba.njit(nogil=True, cache=True)
def _take_hwc_float(frames, rows, at, outs, table):  # pragma: no cover - compiled
    """``outs[at[i], h, w, c] = table[frames[rows[i], h, w, c]]``."""
    _, height, width, channels = frames.shape
    for i in range(rows.shape[0]):
        r, o = rows[i], at[i]
        for h in range(height):
            for w in range(width):
                for c in range(channels):
                    outs[o, h, w, c] = table[frames[r, h, w, c]]
