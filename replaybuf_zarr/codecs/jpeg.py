"""JPEG array->bytes serializer for Zarr v3 frame arrays (one frame per chunk) — replaybuf's lossy
**fast** frame codec.

``"replaybuf.jpeg"`` stores each chunk as a baseline JPEG (ITU-T T.81 / JFIF) through
``imagecodecs.jpeg8_encode`` / ``jpeg8_decode`` (libjpeg-turbo, GIL released): about a millisecond a
640×480 frame each way.  Lossy: the import checks every frame's PSNR against the source and reports it.
Configuration: ``quality`` (1..100) and ``subsampling`` of the chroma (``"444"``: none, ``"420"``: half
in both directions — smaller, a little blurrier colour).  Gray and RGB only (JPEG has no alpha).
Registered with zarr at import and through the ``zarr.codecs`` entry point, like the WebP codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import imagecodecs
import numpy as np
from zarr.registry import register_codec

from replaybuf_core.layout import image_bytes

from .frame_codec import FrameCodec, check_int

__all__ = ["CODEC_NAME", "DEFAULT_QUALITY", "SUBSAMPLINGS", "JpegCodec"]

#: Name under which the codec is written to ``zarr.json`` and registered in zarr.
CODEC_NAME = "replaybuf.jpeg"

#: Default quality: PSNR ≥ 40 dB on natural frames at 4:4:4 (``benchmarks/frames_bench.py``).
DEFAULT_QUALITY = 95

#: Chroma subsamplings (libjpeg-turbo's names): 4:4:4 keeps every colour sample, 4:2:0 a quarter.
SUBSAMPLINGS = ("444", "420")

#: libjpeg's largest side (``JPEG_MAX_DIMENSION``).
JPEG_MAX_DIMENSION = 65500


def _parse_subsampling(value: Any) -> str:
    if not isinstance(value, str) or value not in SUBSAMPLINGS:
        raise ValueError(f"JpegCodec subsampling must be one of {SUBSAMPLINGS}, got {value!r}")
    return value


@dataclass(frozen=True)
class JpegCodec(FrameCodec):
    """Zarr v3 serializer storing each chunk (one uint8 gray or RGB frame) as a JPEG image (lossy).

    Parameters
    ----------
    quality : int, default 95
        libjpeg quality, 1..100.
    subsampling : {"444", "420"}, default "444"
        Chroma subsampling of colour frames (gray frames have none).

    Array layout: dtype uint8, ``(T, H, W)`` gray or ``(T, H, W, C)`` with C in {1, 3}; chunks
    ``(1, H, W[, C])``; sides up to 65500 px (libjpeg's limit).

    Raises TypeError (``quality`` not an int; dtype not uint8) and ValueError (``quality`` outside
    1..100, an unknown ``subsampling``, 4-channel frames, rank, frames per chunk or side) — see
    :class:`~replaybuf_zarr.codecs.frame_codec.FrameCodec`.
    """

    codec_name: ClassVar[str] = CODEC_NAME
    config_keys: ClassVar[tuple[str, ...]] = ("quality", "subsampling")
    channels: ClassVar[tuple[int, ...]] = (1, 3)
    max_side: ClassVar[int] = JPEG_MAX_DIMENSION
    max_side_reason: ClassVar[str] = " (libjpeg's JPEG_MAX_DIMENSION)"
    lossless: ClassVar[bool] = False

    quality: int
    subsampling: str

    def __init__(self, *, quality: int = DEFAULT_QUALITY, subsampling: str = "444") -> None:
        object.__setattr__(self, "quality", check_int("JpegCodec", "quality", quality, 1, 100))
        object.__setattr__(self, "subsampling", _parse_subsampling(subsampling))

    def decode_resized(self, data: bytes, chunk_shape: tuple[int, ...], rows: list[int], fr: Any) -> np.ndarray:
        """The frame cropped and resized as ``fr`` says, decoded at the smallest of libjpeg's DCT
        scales (1, 1/2, 1/4, 1/8) that keeps the crop at least ``fr``'s size (Pillow's ``draft``), then
        cut and resized bilinearly in one step (Pillow's ``resize`` with a box): a 640×480 frame read as
        224×224 decodes at 320×240.  Raises ValueError for data that is not a JPEG of the chunk's size."""
        import io

        from PIL import Image

        height, width = int(chunk_shape[1]), int(chunk_shape[2])
        top, left, h, w = fr.region(height, width)
        try:
            img = Image.open(io.BytesIO(bytes(data)))
            if img.size != (width, height):
                raise ValueError(f"JpegCodec: the image is {img.size[1]}x{img.size[0]} px but the chunk shape "
                                 f"{tuple(chunk_shape)} expects {height}x{width} px")
            img.draft(img.mode, (-(-width * fr.width // w), -(-height * fr.height // h)))
            sx, sy = img.size[0] / width, img.size[1] / height
            out = np.asarray(img.resize((fr.width, fr.height), Image.BILINEAR,
                                        box=(left * sx, top * sy, (left + w) * sx, (top + h) * sy)))
        except (OSError, SyntaxError) as exc:  # Pillow's errors for damaged images
            raise ValueError(f"JpegCodec: the chunk does not decode as a JPEG ({exc})") from None
        if out.ndim == 2:
            out = out[..., None] if len(chunk_shape) == 4 else out
        return out[None].repeat(len(rows), axis=0) if len(rows) != 1 else out[None]

    def encode_frame(self, chunk: np.ndarray) -> bytes:
        """One chunk — uint8 ``(1, H, W[, C])`` — to a JPEG; or, when a pass-through import registered
        a source's JPEG that decodes to exactly this frame (:mod:`replaybuf_core.layout.image_bytes`), to
        those bytes, unchanged.  Raises TypeError (dtype) / ValueError (shape) like :meth:`validate`."""
        if image_bytes.registered():
            chunk = np.asarray(chunk)
            self._check_dtype(chunk.dtype)
            self.check_chunk_shape(chunk.shape)
            found = image_bytes.claim(chunk[0], "jpeg")
            if found is not None:
                return found
        return super().encode_frame(chunk)

    def encode_image(self, frame: np.ndarray) -> bytes:
        """One frame to a baseline JPEG (YCbCr for colour frames)."""
        return imagecodecs.jpeg8_encode(frame, level=self.quality, subsampling=self.subsampling)

    def decode_image(self, data: bytes, channels: int) -> np.ndarray:
        """Decode to RGB ``(H, W, 3)`` or gray ``(H, W)``."""
        return imagecodecs.jpeg8_decode(data)


register_codec(CODEC_NAME, JpegCodec)
