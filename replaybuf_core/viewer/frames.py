"""One stored camera frame as an image file for the browser: PNG (lossless: the page shows the
stored pixels exactly) or JPEG (smaller, for big frames over a slow link)."""

from __future__ import annotations

import numpy as np

#: ``?format=`` → its HTTP media type
FORMATS = {"png": "image/png", "jpeg": "image/jpeg"}


def frame_to_uint8(frame: np.ndarray) -> np.ndarray:
    """A stored frame ``(H, W)`` or ``(H, W, C)`` (C in 1, 3, 4) of any numeric dtype → uint8 pixels
    the browser can show: uint8 as is; bool as 0 / 255; floats with a maximum above 1 read as 0..255,
    others as 0..1 (NaN as 0); other integers clipped to 0..255.  ``(H, W, 1)`` becomes ``(H, W)``.

    Raises ValueError for another shape."""
    f = np.asarray(frame)
    if f.ndim == 3 and f.shape[-1] == 1:
        f = f[..., 0]
    if not (f.ndim == 2 or (f.ndim == 3 and f.shape[-1] in (3, 4))):
        raise ValueError(f"a frame must have shape (H, W) or (H, W, C) with C in 1, 3, 4; got {frame.shape}")
    if f.dtype == np.uint8:
        return np.ascontiguousarray(f)
    if f.dtype == np.bool_:
        return f.astype(np.uint8) * 255
    if f.dtype.kind == "f":
        g = np.nan_to_num(f.astype(np.float64), nan=0.0, posinf=255.0, neginf=0.0)
        if g.size and g.max() <= 1.0:
            g = g * 255.0
        return np.clip(np.rint(g), 0, 255).astype(np.uint8)
    return np.clip(f, 0, 255).astype(np.uint8)


def encode_frame(frame: np.ndarray, fmt: str = "png", quality: int = 90) -> bytes:
    """The bytes of ``frame`` (see :func:`frame_to_uint8`) as a PNG (lossless, zlib level 1: fast)
    or a JPEG of ``quality`` (1–100; an alpha channel is dropped).  imagecodecs encodes both.

    Raises ValueError for an unknown ``fmt`` (the known ones: :data:`FORMATS`)."""
    import imagecodecs

    if fmt not in FORMATS:
        raise ValueError(f"unknown frame format {fmt!r}; known: {sorted(FORMATS)}")
    pixels = frame_to_uint8(frame)
    if fmt == "png":
        return bytes(imagecodecs.png_encode(pixels, level=1))
    if pixels.ndim == 3 and pixels.shape[-1] == 4:
        pixels = np.ascontiguousarray(pixels[..., :3])
    return bytes(imagecodecs.jpeg8_encode(pixels, level=int(quality)))
