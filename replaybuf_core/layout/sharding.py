"""Shard shapes for WebP image arrays.

Image arrays are chunked one frame per chunk (``(1, H, W, C)``, required by the zarr backend's
:class:`replaybuf_zarr.codecs.webp.WebPCodec`), which on a file system means
one small file per frame.  Zarr v3 sharding packs ``n`` consecutive frames
(chunks) into a single stored object ("shard") with an index, so a buffer of
``T`` frames is stored as about ``ceil(T / n)`` objects instead of ``T``.  The
frames inside a shard stay individually decodable (zarr reads only the inner
chunks a selection touches).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

__all__ = [
    "DEFAULT_IMAGE_FRAMES_PER_SHARD",
    "frame_chunk_shape",
    "frame_shard_shape",
    "get_image_shard_shape",
    "validate_image_frames_per_shard",
]

#: Default number of frames (time steps) per shard for image arrays.  With
#: 96x96 RGB frames at roughly 3-10 kB per WebP frame this gives shards of a
#: few MB.
DEFAULT_IMAGE_FRAMES_PER_SHARD = 256


def validate_image_frames_per_shard(n: int | None) -> int | None:
    """Validate a "frames per shard" setting.

    Parameters
    ----------
    n : int or None
        Number of frames (time steps along axis 0) per shard; ``None`` means
        "do not shard".  Python ints and numpy integer scalars are accepted.

    Returns
    -------
    int or None
        ``n`` as a Python ``int``, or ``None`` when ``n`` is ``None``.

    Raises
    ------
    TypeError
        ``n`` is a bool or not an integer (e.g. ``256.0``, ``np.float64(256)``,
        ``"256"``).
    ValueError
        ``n <= 0``.
    """
    if n is None:
        return None
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        raise TypeError(
            f"frames per shard must be an int or None, got {n!r} of type {type(n).__name__}"
        )
    n = int(n)
    if n <= 0:
        raise ValueError(f"frames per shard must be a positive int, got {n}")
    return n


def get_image_shard_shape(image_chunks: Sequence[int], n: int) -> tuple[int, ...]:
    """Shard shape holding ``n`` frames of an image array chunked as ``image_chunks``.

    Parameters
    ----------
    image_chunks : sequence of int
        Chunk shape of the image array, e.g. ``(1, 96, 96, 3)`` (frames on
        axis 0, then height, width[, channels] in pixels).
    n : int
        Frames per shard; must be a positive multiple of ``image_chunks[0]``
        (zarr requires the shard shape to be divisible by the chunk shape).

    Returns
    -------
    tuple of int
        ``(n, *image_chunks[1:])``, e.g. ``(256, 96, 96, 3)`` -- pass it as
        ``shards=`` to ``zarr.create_array``.

    Raises
    ------
    TypeError
        ``n`` is not an integer (see :func:`validate_image_frames_per_shard`).
    ValueError
        ``n <= 0``; ``image_chunks`` is empty or has a non-positive entry;
        ``n`` is not a multiple of ``image_chunks[0]``.
    """
    n_checked = validate_image_frames_per_shard(n)
    if n_checked is None:
        raise TypeError("frames per shard must be an int here, got None (None means no sharding)")
    chunks = tuple(int(c) for c in image_chunks)
    if not chunks:
        raise ValueError("image_chunks must have at least one dimension, got ()")
    if any(c <= 0 for c in chunks):
        raise ValueError(f"image_chunks entries must be positive, got {chunks}")
    if n_checked % chunks[0] != 0:
        raise ValueError(
            f"frames per shard ({n_checked}) must be a multiple of the frames per chunk "
            f"({chunks[0]}, axis 0 of image_chunks {chunks})"
        )
    return (n_checked, *chunks[1:])


def frame_chunk_shape(shape: Sequence[int], codec: object) -> tuple[int, ...]:
    """The chunk shape of a camera array of ``shape`` (steps first) stored with frame codec ``codec``:
    ``(G, H, W[, C])``, ``G`` the codec's ``frames_per_chunk`` (1 for an image codec or any object
    without the attribute; a video codec's GOP length)."""
    frames = int(getattr(codec, "frames_per_chunk", 1) or 1)
    return (frames,) + tuple(int(s) for s in shape[1:])


def frame_shard_shape(chunks: Sequence[int], n: int) -> tuple[int, ...]:
    """:func:`get_image_shard_shape` with ``n`` rounded up to a multiple of the frames per chunk
    (``chunks[0]``): a shard of whole GOPs.  Raises what :func:`get_image_shard_shape` raises."""
    n_checked = validate_image_frames_per_shard(n)
    if n_checked is None:
        raise TypeError("frames per shard must be an int here, got None (None means no sharding)")
    g = max(int(chunks[0]), 1)
    return get_image_shard_shape(chunks, -(-n_checked // g) * g)
