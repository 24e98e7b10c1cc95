"""Lossless JPEG XL array->bytes serializer for Zarr v3 frame arrays (one frame per chunk).

``"replaybuf.jpegxl"`` stores each chunk as a lossless JPEG XL codestream (ISO/IEC 18181; libjxl
through ``imagecodecs.jpegxl_encode`` / ``jpegxl_decode``, which release the GIL).  At effort 1 it is
replaybuf's **exact** frame codec: on natural camera frames it encodes (with its check) ~24× faster than lossless
WebP at method 4 for ~15 % more bytes, and decodes bit for bit (``benchmarks/frames_bench.py``).
Registered with zarr at import and through the ``zarr.codecs`` entry point, like the WebP codec.

libjxl's effort-1 encoder (its "fast lossless" path) is not always lossless: libjxl 0.11 changes a
pixel of some frames (libjxl issues #4287 and #4026; one such frame is ``tests/data/jxl_e1_not_lossless.npy``).
So every frame is decoded again right after encoding and compared; a frame that does not come back
bit for bit is encoded at the next efforts (2, then 7) instead — still one JPEG XL codestream, read by
the same decoder — and a frame no effort keeps exact is an error, never stored.  The check costs one
decode a frame (~5 ms at 640×480) and keeps ``exact`` exact whatever the libjxl version.
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
        """One frame to a lossless JPEG XL codestream, one thread (replaybuf's pools parallelise),
        checked by decoding it again (see the module docstring for why and the fallback efforts).

        Raises ValueError when no effort gives the frame back bit for bit."""
        for effort in dict.fromkeys((self.effort, 2, 7)):
            data = imagecodecs.jpegxl_encode(frame, lossless=True, effort=effort, numthreads=1)
            back = imagecodecs.jpegxl_decode(data, numthreads=1)
            if back.shape == frame.shape and np.array_equal(back, frame):
                return data
        raise ValueError(f"JpegXLCodec: {imagecodecs.jpegxl_version()} does not give this "
                         f"{frame.shape} frame back bit for bit at efforts {self.effort}, 2 or 7; it is not stored")

    def decode_image(self, data: bytes, channels: int) -> np.ndarray:
        """Decode on one thread; gray images come back ``(H, W)``."""
        return imagecodecs.jpegxl_decode(data, numthreads=1)


register_codec(CODEC_NAME, JpegXLCodec)
