"""Zarr v3 frame codecs shipped with replaybuf (array→bytes serializers, one camera frame a chunk).

* ``WebPCodec`` — ``"replaybuf.webp"``, lossless or lossy WebP (:mod:`replaybuf_zarr.codecs.webp`);
* ``JpegXLCodec`` — ``"replaybuf.jpegxl"``, lossless JPEG XL, the *exact* codec
  (:mod:`replaybuf_zarr.codecs.jpegxl`);
* ``JpegCodec`` — ``"replaybuf.jpeg"``, JPEG (libjpeg-turbo), the lossy *fast* codec
  (:mod:`replaybuf_zarr.codecs.jpeg`);
* ``VideoCodec`` — ``"replaybuf.video"``, G frames a chunk as one closed H.264 / AV1 GOP, the lossy
  *compact* codec (:mod:`replaybuf_zarr.codecs.video`; PyAV imported when a chunk is coded).

:data:`FRAME_CODECS` maps each ``zarr.json`` name to its class: the fast reader and writer and the
codec choice (:mod:`replaybuf_zarr.frame_choice`) look codecs up there.
"""

from replaybuf_zarr.codecs.frame_codec import FrameCodec
from replaybuf_zarr.codecs.jpeg import JpegCodec
from replaybuf_zarr.codecs.jpegxl import JpegXLCodec
from replaybuf_zarr.codecs.video import VideoCodec
from replaybuf_zarr.codecs.webp import WebPCodec

#: ``zarr.json`` codec name → frame codec class.
FRAME_CODECS: dict[str, type[FrameCodec]] = {c.codec_name: c for c in (WebPCodec, JpegXLCodec, JpegCodec, VideoCodec)}

__all__ = ["FRAME_CODECS", "FrameCodec", "JpegCodec", "JpegXLCodec", "VideoCodec", "WebPCodec"]
