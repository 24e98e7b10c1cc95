"""Chunk math: validating chunk tuples and choosing chunk shapes for a byte target."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np


def row_bytes(shape: Sequence[int], dtype: object) -> int:
    """Bytes of one decoded row (time on axis 0) of an array of ``shape`` and ``dtype``; a string
    (object) element counts 64."""
    dtype = np.dtype(dtype)
    return int(np.prod(tuple(shape)[1:], dtype=np.int64)) * (dtype.itemsize if dtype != object else 64)


def _is_integral(x: object) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


#: Bytes one chunk may hold before compression: Blosc's limit (2 GiB less its header), the
#: tightest of our codecs'.
MAX_CHUNK_BYTES = 2**31 - 2**16


def check_chunks_compatible(chunks: Sequence[int], shape: Sequence[int], itemsize: int = 1) -> None:
    """Check that ``chunks`` is a valid chunk shape for an array of ``shape``.

    Args:
        chunks: one chunk length per dimension (ints, in elements).
        shape: the array shape.
        itemsize: bytes per element (the array's ``dtype.itemsize``), for the size limit.

    Raises:
        TypeError: ``chunks`` is not a sequence, or an entry is not an integer (``True``/``False`` and
            floats such as ``2.0`` count as non-integral).
        ValueError: the rank of ``chunks`` differs from the rank of ``shape``, an entry is ≤ 0, or
            one chunk would hold more than :data:`MAX_CHUNK_BYTES`.

    A chunk longer than the array along a dimension is allowed (the array may grow into it).
    """
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise TypeError(f"chunks must be a tuple of ints, got {type(chunks).__name__} {chunks!r}")
    if len(chunks) != len(shape):
        raise ValueError(
            f"chunks {tuple(chunks)!r} have rank {len(chunks)} but the array shape {tuple(shape)!r} "
            f"has rank {len(shape)}"
        )
    for axis, c in enumerate(chunks):
        if not _is_integral(c):
            raise TypeError(
                f"chunks {tuple(chunks)!r}: entry {axis} is {c!r} ({type(c).__name__}), not an integer"
            )
        if c <= 0:
            raise ValueError(f"chunks {tuple(chunks)!r}: entry {axis} is {c}, must be > 0")
    nbytes = int(itemsize)
    for c in chunks:
        nbytes *= int(c)
    if nbytes > MAX_CHUNK_BYTES:
        raise ValueError(f"chunks {tuple(chunks)!r}: one chunk would hold {nbytes:,} bytes ({itemsize} per element), "
                         f"more than the {MAX_CHUNK_BYTES:,} (2 GiB less Blosc's header) a chunk may hold; choose a "
                         "shorter chunk length")


def get_optimal_chunks(
    shape: Sequence[int],
    dtype: np.dtype | str | type,
    target_chunk_bytes: float = 2e6,
    max_chunk_length: int | None = None,
) -> tuple[int, ...]:
    """Choose a chunk shape of about ``target_chunk_bytes`` for an array of ``shape`` and ``dtype``.

    Rule (the one diffusion_policy's ``get_optimal_chunks`` follows): walking from the innermost
    dimension outwards, keep dimensions whole while the chunk stays within the byte target; the first
    dimension that would overflow it (the *split* dimension) gets the length that reaches the target,
    capped at its size; all dimensions further out get 1.  ``max_chunk_length`` caps the length of
    axis 0 (time) before the rule is applied.

    Args:
        shape: array shape, axis 0 = time (steps).
        dtype: element dtype; its itemsize (bytes) sets the chunk size.
        target_chunk_bytes: byte target of one chunk (default 2 MB).
        max_chunk_length: optional cap on the time-axis length.

    Returns:
        The chunk shape, a tuple of positive ints of the same rank as ``shape``.

    Raises:
        ValueError: empty shape, a negative dimension, or a non-positive target / cap.
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) == 0:
        raise ValueError("get_optimal_chunks needs a shape of rank >= 1, got ()")
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape!r} has a negative dimension")
    if not target_chunk_bytes > 0:
        raise ValueError(f"target_chunk_bytes must be > 0, got {target_chunk_bytes!r}")
    itemsize = np.dtype(dtype).itemsize or 1
    dims = [max(s, 1) for s in shape]
    if max_chunk_length is not None:
        if int(max_chunk_length) <= 0:
            raise ValueError(f"max_chunk_length must be > 0, got {max_chunk_length!r}")
        dims[0] = min(dims[0], int(max_chunk_length))
    chunks = [1] * len(dims)
    inner_bytes = itemsize
    for axis in range(len(dims) - 1, -1, -1):
        if inner_bytes * dims[axis] <= target_chunk_bytes and axis > 0:
            chunks[axis] = dims[axis]
            inner_bytes *= dims[axis]
            continue
        # the split dimension: as long as the byte target allows, at least 1, at most its size
        chunks[axis] = max(1, min(dims[axis], math.ceil(target_chunk_bytes / inner_bytes)))
        break
    return tuple(chunks)
