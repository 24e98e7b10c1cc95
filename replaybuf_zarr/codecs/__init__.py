"""Zarr v3 codecs shipped with replaybuf.

``WebPCodec`` (zarr name ``"replaybuf.webp"``) stores uint8 image frames as
WebP, one frame per chunk; see :mod:`replaybuf_zarr.codecs.webp`.
"""

from replaybuf_zarr.codecs.webp import WebPCodec

__all__ = ["WebPCodec"]
