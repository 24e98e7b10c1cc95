"""Lossless JPEG XL array->bytes serializer for Zarr v3 frame arrays (one frame per chunk).

``"replaybuf.jpegxl"`` stores each chunk as a lossless JPEG XL codestream (ISO/IEC 18181; libjxl
through ``imagecodecs.jpegxl_encode`` / ``jpegxl_decode``, which release the GIL).  At effort 1 it is
replaybuf's **exact** frame codec: on natural camera frames it encodes ~100× faster than lossless
WebP at method 4 for ~15 % more bytes, and decodes bit for bit (``benchmarks/frames_bench.py``).
Registered with zarr at import and through the ``zarr.codecs`` entry point, like the WebP codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import imagecodecs
import numpy as np
from zarr.registry import register_codec

from .frame_codec import FrameCodec, check_int

__all__ = ["CODEC_NAME", "DEFAULT_EFFORT", "JpegXLCodec"]

#: Name under which the codec is written to ``zarr.json`` and registered in zarr.
CODEC_NAME = "replaybuf.jpegxl"

#: libjxl's effort (1 fastest .. 9 smallest).  1 is the measured sweet spot for natural frames: effort
#: 2 is ~13× slower for ~1 % fewer bytes, effort 3 slower *and* larger (``benchmarks/frames_bench.py``).
DEFAULT_EFFORT = 1


@dataclass(frozen=True)
class JpegXLCodec(FrameCodec):
    """Zarr v3 serializer storing each chunk (one uint8 frame) as a lossless JPEG XL image.

    Parameters
    ----------
    effort : int, default 1
        libjxl's encoder effort, 1..9 (higher: smaller and slower).  The pixels decoded are identical
        at every effort: decode(encode(x)) == x, RGBA alpha included.

    Array layout: dtype uint8, ``(T, H, W)`` gray or ``(T, H, W, C)`` with C in {1, 3, 4}; chunks
    ``(1, H, W[, C])``; sides up to 65535 px (a replaybuf limit; JPEG XL itself allows 2**30).

    Raises TypeError (``effort`` not an int; dtype not uint8) and ValueError (``effort`` outside 1..9;
    rank, frames per chunk, channels or side unsupported) — see
    :class:`~replaybuf_zarr.codecs.frame_codec.FrameCodec`.
    """

    codec_name: ClassVar[str] = CODEC_NAME
    config_keys: ClassVar[tuple[str, ...]] = ("effort",)
    lossless: ClassVar[bool] = True

    effort: int

    def __init__(self, *, effort: int = DEFAULT_EFFORT) -> None:
        object.__setattr__(self, "effort", check_int("JpegXLCodec", "effort", effort, 1, 9))

    def encode_image(self, frame: np.ndarray) -> bytes:
        """One frame to a lossless JPEG XL codestream, one thread (replaybuf's pools parallelise)."""
        return imagecodecs.jpegxl_encode(frame, lossless=True, effort=self.effort, numthreads=1)

    def decode_image(self, data: bytes, channels: int) -> np.ndarray:
        """Decode on one thread; gray images come back ``(H, W)``."""
        return imagecodecs.jpegxl_decode(data, numthreads=1)


register_codec(CODEC_NAME, JpegXLCodec)
