"""Camera frames of a batch converted once per batch: uint8 (..., H, W, C) to channels-first and/or
float32 in [0, 1] — LeRobot's sample format (``x.float() / 255``, (C, H, W)).

The float conversion of a batch of natural frames is most of what is left after decoding (two
640×480 frames a sample: 1.8 M values, 7.4 MB of float32).  It is one pass per frame, compiled
(numba, cached on disk): each output channel plane is written in order from the interleaved frame
through a 256-entry table of ``float32(i) / float32(255)`` — exactly the quotient NumPy's and
torch's float32 division give, no multiply-by-reciprocal rounding — instead of a strided transpose
copy followed by a division pass (measured 0.38 against 0.61 ms a 640×480 frame, one thread).
Outputs come from the caller's :class:`~replaybuf_core.sampling.arena.OutputArena` when given (a
batch's pages are then not faulted in anew every batch), or from a worker's shared memory.
Large batches are converted on one slab per core (the kernel releases the GIL).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

import numpy as np
import torch

from replaybuf_core.compiled import numba

__all__ = ["convert_images", "converted_empty", "take_converted", "warm_kernels", "FLOAT_OF_UINT8"]

#: ``float32(i) / float32(255)`` for every uint8 ``i``: the value a float32 division gives
FLOAT_OF_UINT8 = np.arange(256, dtype=np.float32) / np.float32(255)
FLOAT_OF_UINT8.flags.writeable = False

#: arrays of at least this many values are converted on several threads
PARALLEL_VALUES = 1 << 22
_POOL: tuple[int, ThreadPoolExecutor] | None = None


def convert_images(batch: dict[str, np.ndarray], keys: Iterable[str], channels_first: bool,
                   to_float: bool, shared: bool = False, arena: Any = None) -> None:
    """Convert image arrays of ``batch`` in place (the dict's values are replaced), once per batch.

    Each ``batch[key]`` is uint8 (..., H, W, C).  ``channels_first`` gives (..., C, H, W) (a new
    C-contiguous array); ``to_float`` gives float32 in [0, 1], bit for bit ``x / 255`` computed in
    float32 (the value ``torch``'s ``x.float() / 255`` gives, LeRobot's conversion).  Done without
    waking torch's intra-op thread pool inside a loader, on one slab of the batch per core for large
    batches.

    ``shared=True`` (DataLoader workers): each converted array is written straight into a new
    shared-memory ``torch.Tensor``, which replaces the value — the batch then crosses to the main
    process without another copy of its largest part.  Otherwise the outputs come from ``arena``
    (an :class:`~replaybuf_core.sampling.arena.OutputArena`) when given, else are new arrays.

    Raises:
        ValueError: a key whose array is not uint8 with at least 3 dimensions (the message names it).
    """
    for key in keys:
        x = batch[key]
        if x.dtype != np.uint8 or x.ndim < 3:
            raise ValueError(f"image key {key!r} must be uint8 (..., H, W, C), got {x.dtype} {x.shape}")
        if not (to_float or channels_first):
            continue
        shape = x.shape[:-3] + ((x.shape[-1],) + x.shape[-3:-1] if channels_first else x.shape[-3:])
        value, out = _empty(shape, np.float32 if to_float else np.uint8, shared, arena)
        _convert(np.ascontiguousarray(x), out, channels_first, to_float)
        batch[key] = value


def converted_empty(rows_shape: tuple[int, ...], frame_shape: tuple[int, ...], channels_first: bool, to_float: bool,
                    shared: bool = False, arena: Any = None) -> tuple[Any, np.ndarray]:
    """Where :func:`take_converted` writes a batch of frames: ``(value, view)`` — the value to put in
    the batch (an array, from ``arena`` when given, or with ``shared`` a shared-memory
    ``torch.Tensor``) and a NumPy view of it, of shape ``rows_shape + (C, H, W)`` with
    ``channels_first`` else ``rows_shape + (H, W, C)`` (``frame_shape`` is ``(H, W, C)``), float32
    with ``to_float`` else uint8."""
    h, w, c = frame_shape
    shape = tuple(rows_shape) + ((c, h, w) if channels_first else (h, w, c))
    return _empty(shape, np.float32 if to_float else np.uint8, shared, arena)


def take_converted(src: np.ndarray, rows: np.ndarray, out: np.ndarray, at: np.ndarray, channels_first: bool,
                   to_float: bool) -> None:
    """``out[at[i]] = convert(src[rows[i]])``: frames gathered and converted as
    :func:`convert_images` converts them, in one pass (no gathered uint8 batch in between).

    ``src``: uint8 ``(N, H, W, C)`` frames, C-contiguous; ``rows``, ``at``: int64 ``(M,)`` — which
    frame of ``src``, and where in ``out`` (``(K, C, H, W)`` with ``channels_first`` else
    ``(K, H, W, C)``; float32 ``x / 255`` bit for bit with ``to_float``, else uint8), e.g. a view
    from :func:`converted_empty` reshaped to one frame a row.

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
    n = min(os.cpu_count() or 1, rows.size)
    if rows.size * int(np.prod(src.shape[1:])) < PARALLEL_VALUES or n < 2:
        kernel(src, rows, at, out, FLOAT_OF_UINT8)
        return
    bounds = np.linspace(0, rows.size, n + 1).astype(int)
    futures = [_pool().submit(kernel, src, rows[a:b], at[a:b], out, FLOAT_OF_UINT8)
               for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def _empty(shape: tuple[int, ...], dtype: Any, shared: bool, arena: Any) -> tuple[Any, np.ndarray]:
    """(the value to store, a NumPy view to write it through): an array (from ``arena`` when given),
    or a shared-memory tensor and its view."""
    if shared:
        t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.uint8).share_memory_()
        return t, t.numpy()
    out = arena.empty(shape, dtype) if arena is not None else np.empty(shape, dtype=dtype)
    return out, out


def _pool() -> ThreadPoolExecutor:
    """This process's conversion threads (a new pool after a fork: threads do not survive it)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="replaybuf-float"))
    return _POOL[1]


def _convert(x: np.ndarray, out: np.ndarray, channels_first: bool, to_float: bool) -> None:
    """``out`` (C-contiguous) from the C-contiguous frames ``x``, in slabs of frames on the conversion
    threads when large."""
    frames = x.reshape((-1,) + x.shape[-3:])
    outs = out.reshape((-1,) + out.shape[-3:])
    n = min(os.cpu_count() or 1, len(frames))
    if x.size < PARALLEL_VALUES or n < 2:
        _convert_frames(frames, outs, channels_first, to_float)
        return
    bounds = np.linspace(0, len(frames), n + 1).astype(int)
    futures = [_pool().submit(_convert_frames, frames[a:b], outs[a:b], channels_first, to_float)
               for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def _convert_frames(frames: np.ndarray, outs: np.ndarray, channels_first: bool, to_float: bool) -> None:
    if not to_float:  # channels first, uint8
        np.copyto(outs, np.moveaxis(frames, -1, -3))
    else:  # every frame to its own place: the gathering kernels with rows = places = 0..n-1
        every = np.arange(len(frames), dtype=np.int64)
        (_take_chw_float if channels_first else _take_hwc_float)(frames, every, every, outs, FLOAT_OF_UINT8)


_WARM_PID: list[int | None] = [None]


def warm_kernels() -> None:
    """Load the compiled conversion kernels in this process now (once): numba's first call of a
    cached kernel starts its compiler, ~0.2–0.5 s that would otherwise land on the first batch.  The
    datasets call it when they are made (DataLoader workers forked later inherit the loaded code).
    Synchronous on purpose: a kernel loading on a thread while a DataLoader forks would hold the fork
    until it is loaded (:mod:`replaybuf_core.compiled` keeps numba's compiler lock across a fork)."""
    if _WARM_PID[0] == os.getpid():
        return
    frame, out = np.zeros((1, 1, 1, 3), np.uint8), np.empty((1, 3, 1, 1), np.float32)
    zero = np.zeros(1, np.int64)
    _take_chw_float(frame, zero, zero, out, FLOAT_OF_UINT8)
    _take_hwc_float(frame, zero, zero, out.reshape(1, 1, 1, 3), FLOAT_OF_UINT8)
    _WARM_PID[0] = os.getpid()


@numba.njit(nogil=True, cache=True)
def _take_chw_float(frames, rows, at, outs, table):  # pragma: no cover - compiled
    """``outs[at[i], c, h, w] = table[frames[rows[i], h, w, c]]``."""
    _, height, width, channels = frames.shape
    for i in range(rows.shape[0]):
        r, o = rows[i], at[i]
        for c in range(channels):
            for h in range(height):
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
