"""One stored camera frame as an image file for the browser: PNG (lossless) or JPEG (smaller, for big
frames over a slow link).

uint8 frames are sent as stored: the page shows the stored pixels exactly.  Other dtypes (depth as
uint16, float images) are scaled to 0..255 from *one* value range per camera key
(:func:`display_range`, taken from frames spread over the store), so brightness does not jump from
frame to frame while scrubbing."""

from __future__ import annotations

import numpy as np

#: ``?format=`` → its HTTP media type
FORMATS = {"png": "image/png", "jpeg": "image/jpeg"}


def display_range(dtype: np.dtype, sample: np.ndarray | None) -> tuple[float, float] | None:
    """The value range ``(lo, hi)`` shown as 0..255 for a camera of ``dtype``, from ``sample``
    (frames of the key; None when the store is empty): None for uint8 (shown as stored); (0, 1) for
    bool; for floats (0, 1) when every finite sampled value lies in [0, 1], (0, 255) when in
    [0, 255], else the sampled min and max; for other integers the sampled min and max (a depth
    camera's millimetres).  ``hi > lo`` always."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return None
    if dtype == np.bool_:
        return (0.0, 1.0)
    values = np.asarray(sample, dtype=np.float64) if sample is not None else np.zeros(0)
    values = values[np.isfinite(values)]
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    if dtype.kind == "f":
        if lo >= 0 and hi <= 1:
            return (0.0, 1.0)
        if lo >= 0 and hi <= 255:
            return (0.0, 255.0)
    return (lo, hi if hi > lo else lo + 1.0)


def frame_to_uint8(frame: np.ndarray, value_range: tuple[float, float] | None = None) -> np.ndarray:
    """A stored frame ``(H, W)`` or ``(H, W, C)`` (C in 1, 3, 4) → uint8 pixels the browser can show:
    uint8 as is (``value_range`` ignored); other dtypes mapped linearly from ``value_range`` (default:
    the frame's own :func:`display_range`) to 0..255, clipped, NaN as 0.  ``(H, W, 1)`` becomes
    ``(H, W)``.

    Raises ValueError for another shape."""
    f = np.asarray(frame)
    if f.ndim == 3 and f.shape[-1] == 1:
        f = f[..., 0]
    if not (f.ndim == 2 or (f.ndim == 3 and f.shape[-1] in (3, 4))):
        raise ValueError(f"a frame must have shape (H, W) or (H, W, C) with C in 1, 3, 4; got {frame.shape}")
    if f.dtype == np.uint8:
        return np.ascontiguousarray(f)
    lo, hi = value_range if value_range is not None else display_range(f.dtype, f)
    g = (np.nan_to_num(f.astype(np.float64), nan=lo, posinf=hi, neginf=lo) - lo) * (255.0 / (hi - lo))
    return np.clip(np.rint(g), 0, 255).astype(np.uint8)


def encode_frame(frame: np.ndarray, fmt: str = "png", quality: int = 90,
                 value_range: tuple[float, float] | None = None) -> bytes:
    """The bytes of ``frame`` (see :func:`frame_to_uint8`, with ``value_range``) as a PNG (lossless,
    zlib level 1: fast) or a JPEG of ``quality`` (1–100; an alpha channel is dropped).  imagecodecs
    encodes both.

    Raises ValueError for an unknown ``fmt`` (the known ones: :data:`FORMATS`)."""
    import imagecodecs

    if fmt not in FORMATS:
        raise ValueError(f"unknown frame format {fmt!r}; known: {sorted(FORMATS)}")
    pixels = frame_to_uint8(frame, value_range)
    if fmt == "png":
        return bytes(imagecodecs.png_encode(pixels, level=1))
    if pixels.ndim == 3 and pixels.shape[-1] == 4:
        pixels = np.ascontiguousarray(pixels[..., :3])
    return bytes(imagecodecs.jpeg8_encode(pixels, level=int(quality)))
