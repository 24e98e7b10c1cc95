"""How the import pipeline stores each key of a source (the same rules for every format).

* ``frames`` (camera images ``(H, W, C)``, C in 1/3/4, sides 8..16382): uint8 → the destination
  backend's image codec for the key's :class:`~replaybuf_core.layout.frame_choice.FrameChoice` (zarr:
  ``exact`` = lossless JPEG XL by default; ``fast`` = JPEG; lossless or lossy WebP), one frame a chunk,
  ``image_frames_per_shard`` frames a shard.  Other numeric dtypes (Push-T's float32 pixels) go the
  same way only when every value is proven to be an integer in 0..255 as it streams
  (:func:`~replaybuf_core.importing.uint8_exact.as_uint8_if_lossless`); ``keep_dtype`` keeps them.
* ``depth`` (depth maps, e.g. uint16): lossless Blosc in the source dtype, never a frame codec (they hold 8 bits).
* ``numbers``: the source dtype, Blosc lz4 (the ``"default"`` preset), chunks of about 2 MB
  (:func:`~replaybuf_core.layout.chunks.get_optimal_chunks`).
* ``strings``: text arrays, uncompressed.

Values in a non-native byte order (big-endian HDF5 datasets) are stored in native order: the same
values bit for bit; the source dtype is recorded (``conversions`` attribute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybuf_core.layout.chunks import get_optimal_chunks
from replaybuf_core.layout.compressors import resolve_compressor
from replaybuf_core.layout.frame_choice import FrameChoice
from replaybuf_core.layout.schema import is_frame_shape
from replaybuf_core.layout.sharding import frame_chunk_shape, frame_shard_shape
from replaybuf_core.source import KeySpec


@dataclass
class KeyPlan:
    """The storage of one key: full ``shape`` (steps first), source and stored dtypes, chunks,
    shards, codec; ``converted``: stored as uint8 after the proof; ``lossy``: lossy image codec;
    ``note``: what the report says about the choice (e.g. why a float image was kept)."""

    key: str
    spec: KeySpec
    shape: tuple[int, ...]
    src_dtype: np.dtype
    dtype: np.dtype
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codec: Any
    image: bool
    converted: bool
    lossy: bool
    note: str | None = None


def native(dtype: np.dtype) -> np.dtype:
    """``dtype`` in this machine's byte order (stores keep native-order values; an HDF5 source may
    hold big-endian ones)."""
    dtype = np.dtype(dtype)
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def plan_key(key: str, spec: KeySpec, n_steps: int, dst: Any, keep_dtype: bool, choice: FrameChoice | None,
             frames_per_shard: int | None, kept: dict[str, str]) -> KeyPlan:
    """The :class:`KeyPlan` of ``key`` (``n_steps`` rows in all) on the destination backend ``dst``.
    ``choice``: the key's frame codec (None: ``exact``; used only when the key is stored as frames).
    ``kept``: keys whose conversion to uint8 failed its proof (key → why); they keep their dtype."""
    shape = (int(n_steps),) + spec.shape
    dtype = native(spec.dtype)
    note = kept.get(key)
    if dtype != spec.dtype and note is None:
        note = (f"byte order: the source's {spec.dtype.str} is stored as native {dtype} (the same values, bit "
                "for bit; the source dtype is recorded in the conversions attribute)")
    image_codec = getattr(dst, "image_codec", None)
    frames = spec.kind == "frames" and is_frame_shape(shape)
    if frames and (dtype == np.uint8 or (dtype.kind in "iuf" and not keep_dtype and key not in kept)):
        chunks = (1,) + shape[1:]
        if image_codec is not None:
            codec = image_codec(choice)
            chunks = frame_chunk_shape(shape, codec)
            shards = frame_shard_shape(chunks, frames_per_shard) if frames_per_shard else None
            lossy = choice is not None and not choice.lossless
            if choice is not None and choice.passthrough and note is None and choice.codec == "jpeg":
                note = ("the source's JPEG bytes, passed through (the quality and subsampling in zarr.json apply "
                        "only to frames appended later)")
            elif choice is not None and choice.passthrough and note is None:
                note = (f"the source's {choice.bitstream} packets, passed through ({choice.gop} frames a chunk; "
                        "the crf and preset in zarr.json apply only to frames appended later)")
        else:  # a backend without an image codec: exact frames, compressed as numbers
            codec, shards, lossy = resolve_compressor("default"), None, False
        return KeyPlan(key, spec, shape, spec.dtype, np.dtype(np.uint8), chunks, shards, codec, True,
                       dtype != np.uint8, lossy, note)
    if frames and dtype.kind in "iuf" and keep_dtype and note is None:
        note = f"kept as {dtype} (keep_dtype)"
    if spec.kind == "depth" and note is None:
        note = f"depth: {dtype}, lossless Blosc (frame codecs hold 8 bits only)"
    chunks = get_optimal_chunks((max(shape[0], 1),) + shape[1:], dtype)
    codec = None if dtype == object else resolve_compressor("default")
    return KeyPlan(key, spec, shape, spec.dtype, dtype, chunks, None, codec, False, False, False, note)
