"""A backend-neutral frame choice (:class:`~replaybuf_core.layout.frame_choice.FrameChoice`) as the zarr
frame codec that stores it."""

from __future__ import annotations

from typing import Any


def zarr_frame_codec(choice: Any) -> Any:
    """The zarr frame codec of a parsed :class:`~replaybuf_core.layout.frame_choice.FrameChoice`."""
    from .codecs import JpegCodec, JpegXLCodec, WebPCodec
    from .codecs.webp import LOSSLESS_LEVEL

    if choice.codec == "jpegxl":
        return JpegXLCodec(effort=choice.effort)
    if choice.codec == "video":
        from .codecs.video import VideoCodec

        return VideoCodec(codec=choice.bitstream, crf=choice.quality, gop=choice.gop)
    if choice.codec == "jpeg":
        return JpegCodec(quality=choice.quality, subsampling=choice.subsampling)
    if choice.lossless and getattr(choice, "method", None) is not None:  # ``webp:mM``: effort 0 at method M
        return WebPCodec(level=0, lossless=True, method=choice.method)
    if choice.lossless:
        return WebPCodec(level=LOSSLESS_LEVEL, lossless=True)
    return WebPCodec(level=choice.quality, lossless=False)
