"""WebP array->bytes serializer for Zarr v3 image arrays (one frame per chunk).

The codec stores every chunk of a ``uint8`` image array as one standalone WebP image.  It is
registered with zarr under the name ``"replaybuf.webp"`` both at import time
(``zarr.registry.register_codec``) and through the ``zarr.codecs`` entry point declared in
``pyproject.toml``, so a process that never imports replaybuf can still open and read WebP arrays
with plain ``zarr.open_group`` / ``zarr.open_array``.

Encoding and decoding use ``imagecodecs.webp_encode`` / ``webp_decode`` (libwebp), which release the
GIL; the async codec methods run them through ``asyncio.to_thread`` so zarr's concurrent codec
pipeline works on several frames in parallel.  What all frame codecs share (checks, zarr hooks, the
``zarr.json`` round trip) is :class:`~replaybuf_zarr.codecs.frame_codec.FrameCodec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import imagecodecs
import numpy as np
from zarr.registry import register_codec

from .frame_codec import FrameCodec, check_int

__all__ = [
    "CODEC_NAME",
    "DEFAULT_LEVEL",
    "DEFAULT_LOSSLESS",
    "LOSSLESS_LEVEL",
    "MAX_FRAME_SIDE",
    "WEBP_MAX_DIMENSION",
    "WebPCodec",
    "check_chunk_shape",
]

#: Name under which the codec is written to ``zarr.json`` and registered in zarr.
CODEC_NAME = "replaybuf.webp"

#: Default WebP quality (0-100).
DEFAULT_LEVEL = 99

#: Default encoding mode of the codec class (lossy, for zarr users who name it themselves);
#: replaybuf's ``--frames webp`` passes ``lossless=True``.
DEFAULT_LOSSLESS = False

#: The ``level`` replaybuf uses for lossless frames: in lossless mode it is libwebp's effort
#: (the pixels are identical at every level); 90 is close to the smallest output at a modest cost.
LOSSLESS_LEVEL = 90

#: Largest width/height a WebP bitstream can describe (14-bit fields in the
#: VP8/VP8L headers; WebP container specification, "Canvas Width/Height").
WEBP_MAX_DIMENSION = 16383

#: Largest frame side this codec accepts, in pixels.  One less than
#: :data:`WEBP_MAX_DIMENSION` because ``imagecodecs.webp_encode`` checks
#: ``side < 16383`` (strictly) and rejects a 16383-pixel side.
MAX_FRAME_SIDE = WEBP_MAX_DIMENSION - 1

#: libwebp effort ("method", 0=fast .. 6=slowest/smallest) when the configuration names none.
#: Pinned here rather than relying on imagecodecs' default so the bytes written do not silently
#: change with an imagecodecs upgrade.
WEBP_METHOD = 4


def _parse_lossless(lossless: Any) -> bool:
    if not isinstance(lossless, (bool, np.bool_)):
        raise TypeError(
            f"WebPCodec lossless must be a bool, got {lossless!r} "
            f"of type {type(lossless).__name__}"
        )
    return bool(lossless)


@dataclass(frozen=True)
class WebPCodec(FrameCodec):
    """Zarr v3 serializer that stores each chunk (one image frame) as a WebP image.

    Parameters
    ----------
    level : int, default 99
        WebP quality, 0..100.  In lossy mode it is libwebp's quality factor
        (higher = better fidelity, usually larger output); in lossless mode it
        is libwebp's compression effort (higher = smaller, slower), and the
        decoded pixels are identical at every level.
    method : int, default 4 (:data:`WEBP_METHOD`)
        libwebp's ``method``, 0..6: the speed / size trade-off of the encoder
        (0 fastest).  The decoder reads every method; it changes the bytes,
        never the decoded pixels of a lossless frame.  Written to ``zarr.json``
        only when not the default, so arrays written before it existed keep
        their configuration.
    lossless : bool, default False
        Use WebP's lossless (VP8L) bitstream: decode(encode(x)) == x exactly,
        including the RGB values of fully transparent RGBA pixels.  Lossy mode
        (VP8) converts to YUV 4:2:0 and is not bit-exact.

    Array layout
    ------------
    dtype ``uint8``; array shape ``(T, H, W)`` (gray) or ``(T, H, W, C)``
    with ``C`` in {1, 3, 4} (gray, RGB, RGBA, channel order kept as is: RGB
    in, RGB out).  Chunks hold exactly one frame: ``(1, H, W)`` or
    ``(1, H, W, C)``, with the channel axis not split across chunks.  Frame
    sides are limited to :data:`MAX_FRAME_SIDE` (16382) pixels.  Gray frames
    are stored as R=G=B images (WebP has no gray mode) and turned back into
    one channel on decode.  A decoded chunk always has exactly the chunk
    shape and dtype ``uint8``.

    Raises
    ------
    TypeError
        ``level`` is not an int (bools rejected) or ``lossless`` is not a bool;
        at array creation (:meth:`validate` / :meth:`evolve_from_array_spec`)
        when the dtype is not uint8.
    ValueError
        ``level`` outside 0..100 or ``method`` outside 0..6; at array creation when the rank, the
        frames per chunk, the channel count or a frame side is not supported
        (see :meth:`validate`).

    Examples
    --------
    >>> zarr.create_array(store, name="img", shape=(N, 96, 96, 3),
    ...                   chunks=(1, 96, 96, 3), dtype="uint8",
    ...                   serializer=WebPCodec(level=99, lossless=False),
    ...                   compressors=None)                       # doctest: +SKIP

    Add ``shards=(256, 96, 96, 3)`` to pack 256 frames into one stored object.
    """

    codec_name: ClassVar[str] = CODEC_NAME
    config_keys: ClassVar[tuple[str, ...]] = ("level", "lossless", "method")
    max_side: ClassVar[int] = MAX_FRAME_SIDE
    max_side_reason: ClassVar[str] = (
        f" (WebP bitstreams describe at most {WEBP_MAX_DIMENSION} px per side and "
        f"imagecodecs' encoder only accepts sides < {WEBP_MAX_DIMENSION})")

    level: int
    lossless: bool
    method: int

    def __init__(self, *, level: int = DEFAULT_LEVEL, lossless: bool = DEFAULT_LOSSLESS,
                 method: int = WEBP_METHOD) -> None:
        object.__setattr__(self, "level", check_int("WebPCodec", "level", level, 0, 100))
        object.__setattr__(self, "lossless", _parse_lossless(lossless))
        object.__setattr__(self, "method", check_int("WebPCodec", "method", method, 0, 6))

    def __repr__(self) -> str:
        method = "" if self.method == WEBP_METHOD else f", method={self.method}"
        return f"WebPCodec(level={self.level}, lossless={self.lossless}{method})"

    def to_dict(self) -> dict[str, Any]:
        """``zarr.json``'s entry; ``method`` only when it is not :data:`WEBP_METHOD`."""
        doc = super().to_dict()
        if self.method == WEBP_METHOD:
            del doc["configuration"]["method"]
        return doc

    def encode_image(self, frame: np.ndarray) -> bytes:
        """One frame to a WebP file (VP8L when lossless, VP8 otherwise); gray frames as R=G=B."""
        if frame.ndim == 2:
            # WebP has no gray mode: store R = G = B.
            frame = np.repeat(frame[..., None], 3, axis=2)
        # imagecodecs encodes losslessly whenever ``lossless`` is None (its
        # default), whatever ``level`` is -- so always pass both explicitly.
        return imagecodecs.webp_encode(
            frame, level=self.level, lossless=self.lossless, method=self.method
        )

    def decode_image(self, data: bytes, channels: int) -> np.ndarray:
        """RGBA frames are decoded with ``hasalpha=True`` because libwebp drops an all-opaque alpha
        channel when encoding; gray frames are decoded as RGB and reduced to one channel with the
        rounded channel mean (exact for lossless data, where R = G = B)."""
        img = imagecodecs.webp_decode(data, hasalpha=channels == 4)
        if channels == 1 and img.ndim == 3:
            total = img[..., :3].sum(axis=2, dtype=np.uint16)
            img = ((total + 1) // 3).astype(np.uint8)
        return img


#: One chunk shape checked for WebP (ValueError naming the offending value).
check_chunk_shape = WebPCodec.check_chunk_shape

register_codec(CODEC_NAME, WebPCodec)
