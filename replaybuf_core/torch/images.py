"""Camera frames of a batch converted once per batch: uint8 (..., H, W, C) to channels-first and/or
float32 in [0, 1] — LeRobot's sample format (``x.float() / 255``, (C, H, W)).

The kernels are :mod:`replaybuf_core.layout.frame_convert`'s (one compiled pass a frame, bit for
bit ``x / 255``: 0.32 ms a 640×480 frame against 0.61 for a strided transpose copy and a division
pass, one thread).  The datasets hand the conversion to the read where the backend can apply it as
each frame is decoded (:func:`sample_converted`); what is left is converted here.  Outputs come
from the caller's :class:`~replaybuf_core.sampling.arena.OutputArena` when given (a
batch's pages are then not faulted in anew every batch), or from a worker's shared memory.
Large batches are converted on one slab per core (the kernel releases the GIL).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import numpy as np
import torch

from replaybuf_core.layout.frame_convert import (FLOAT_OF_UINT8, PARALLEL_VALUES, FrameConversion, conversion_pool,
                                                 convert_frames, take_converted)
from replaybuf_core.layout.frame_convert import warm_kernels as _warm

__all__ = ["convert_images", "converted_empty", "sample_converted", "take_converted", "warm_kernels", "FLOAT_OF_UINT8"]


def sample_converted(sampler: Any, indices: np.ndarray, keys: Iterable[str], channels_first: bool, to_float: bool,
                     shared: bool = False) -> dict[str, Any]:
    """``sampler.sample_batch(indices)`` with the image ``keys`` converted as :func:`convert_images`
    converts them, bit for bit.  A sampler that knows its camera keys (``WindowSampler.cameras``),
    over a buffer whose reads take ``convert=`` (``WindowSampler.converts``), has the read convert
    each frame as it is decoded (``sample_batch(convert=)``: no gathered uint8 batch, the frame
    still in cache), into shared memory in a DataLoader worker (``shared``); the other keys are
    converted after the batch is read.  Raises what the two raise."""
    keys = list(keys)
    fusing = (channels_first or to_float) and getattr(sampler, "converts", False)
    fused = [k for k in keys if k in getattr(sampler, "cameras", ())] if fusing else []
    arena = getattr(sampler, "arena", None)
    if not fused:
        arrays = sampler.sample_batch(indices)
        convert_images(arrays, keys, channels_first, to_float, shared=shared, arena=arena)
        return arrays
    conversion = FrameConversion(bool(channels_first), bool(to_float))
    values, out = {}, None
    if shared:  # written straight into the tensors that cross to the main process
        out = {}
        for k in fused:
            shape = (len(indices),) + sampler.sample_shape(k, conversion)
            values[k], out[k] = _empty(shape, conversion.dtype, True, None)
    arrays = sampler.sample_batch(indices, out=out, convert={k: conversion for k in fused})
    arrays.update(values)
    convert_images(arrays, [k for k in keys if k not in fused], channels_first, to_float, shared=shared, arena=arena)
    return arrays

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


def _empty(shape: tuple[int, ...], dtype: Any, shared: bool, arena: Any) -> tuple[Any, np.ndarray]:
    """(the value to store, a NumPy view to write it through): an array (from ``arena`` when given),
    or a shared-memory tensor and its view."""
    if shared:
        t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.uint8).share_memory_()
        return t, t.numpy()
    out = arena.empty(shape, dtype) if arena is not None else np.empty(shape, dtype=dtype)
    return out, out


def _convert(x: np.ndarray, out: np.ndarray, channels_first: bool, to_float: bool) -> None:
    """``out`` (C-contiguous) from the C-contiguous frames ``x``, in slabs of frames on the conversion
    threads when large."""
    frames = x.reshape((-1,) + x.shape[-3:])
    outs = out.reshape((-1,) + out.shape[-3:])
    n = min(os.cpu_count() or 1, len(frames))
    if x.size < PARALLEL_VALUES or n < 2:
        convert_frames(frames, outs, channels_first, to_float)
        return
    bounds = np.linspace(0, len(frames), n + 1).astype(int)
    futures = [conversion_pool().submit(convert_frames, frames[a:b], outs[a:b], channels_first, to_float)
               for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


_WARM_PID: list[int | None] = [None]


def warm_kernels() -> None:
    """Load the compiled conversion kernels in this process now (once): numba's first call of a
    cached kernel starts its compiler, ~0.2–0.5 s that would otherwise land on the first batch.  The
    datasets call it when they are made (DataLoader workers forked later inherit the loaded code).
    Synchronous on purpose: a kernel loading on a thread while a DataLoader forks would hold the fork
    until it is loaded (:mod:`replaybuf_core.compiled` keeps numba's compiler lock across a fork)."""
    if _WARM_PID[0] == os.getpid():
        return
    _warm()
    _WARM_PID[0] = os.getpid()
