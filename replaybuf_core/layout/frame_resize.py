"""Reduced-resolution reads of camera frames: what ``resize=`` / ``crop=`` ask for, checked against a
frame's shape, and the one-frame resize every read path falls back on.

Policies often train at 224 × 224 or 96 × 96 on cameras recorded at 640 × 480.  Decoding the full
frame and then resizing it spends most of the time on pixels thrown away; the read paths apply the
reduction where it is cheapest instead — a JPEG is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain
(libjpeg's scaled IDCT, through Pillow's ``draft``) before the last resize, a video frame is scaled by
libswscale in the same pass that converts it to RGB — so the result equals "crop, then resize
bilinearly" up to the interpolation of the path taken (not bit for bit; a store's own pixels are read
by reads without ``resize``).

A :class:`FrameResize` is ``(height, width)`` and an optional ``crop = (top, left, height, width)`` in
the stored frame's pixels, applied first.  Making frames larger is refused: it reads nothing cheaper.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["FrameResize", "resize_frame", "parse_resize"]


def _size(key: str, what: str, value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != n or any(
            isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) for v in value):
        raise ValueError(f"{what} of camera key {key!r} must be {n} ints, got {value!r}")
    return tuple(int(v) for v in value)


@dataclass(frozen=True)
class FrameResize:
    """Frames of one camera read as ``(height, width)`` px, after an optional ``crop = (top, left,
    height, width)`` (stored-frame pixels)."""

    height: int
    width: int
    crop: tuple[int, int, int, int] | None = None

    def region(self, frame_height: int, frame_width: int) -> tuple[int, int, int, int]:
        """``(top, left, height, width)`` of the stored frame that is resized: the crop, or all of it."""
        return self.crop if self.crop is not None else (0, 0, int(frame_height), int(frame_width))

    def check(self, key: str, frame_height: int, frame_width: int) -> None:
        """Raise ValueError naming ``key`` for a size that is not positive, a crop outside the
        ``frame_height`` × ``frame_width`` frame, or a size larger than the region it comes from."""
        if self.height < 1 or self.width < 1:
            raise ValueError(f"resize of camera key {key!r}: the size must be positive, got "
                             f"{self.height}x{self.width}")
        top, left, h, w = self.region(frame_height, frame_width)
        if self.crop is not None and (top < 0 or left < 0 or h < 1 or w < 1 or top + h > frame_height
                                      or left + w > frame_width):
            raise ValueError(f"crop of camera key {key!r}: (top={top}, left={left}, height={h}, width={w}) is "
                             f"not inside its {frame_height}x{frame_width} frames")
        if self.height > h or self.width > w:
            what = "crop" if self.crop is not None else "frames"
            raise ValueError(f"resize of camera key {key!r}: {self.height}x{self.width} is larger than its "
                             f"{h}x{w} {what} (a read only makes frames smaller)")


def parse_resize(resize: Any, crop: Any, frame_shapes: Mapping[str, Sequence[int]]) -> dict[str, FrameResize]:
    """``{key: FrameResize}`` from a sampler's ``resize=`` and ``crop=`` arguments, checked.

    ``resize``: None, ``(H, W)`` for every camera key of ``frame_shapes`` (``{key: (T, H, W, C)}``), or
    ``{key: (H, W)}``; ``crop``: None, ``(top, left, height, width)`` for every resized key, or
    ``{key: (...)}`` (a key cropped and not resized keeps the crop's size).

    Raises:
        KeyError: a key that is not a camera key here (the message lists them).
        ValueError: see :meth:`FrameResize.check`; sizes that are not ints.
    """
    if resize is None and crop is None:
        return {}
    keys = list(frame_shapes)

    def per_key(value: Any, n: int, what: str) -> dict[str, tuple[int, ...]]:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            unknown = [k for k in value if k not in frame_shapes]
            if unknown:
                raise KeyError(f"{what}: {unknown} are not camera keys here; the camera keys are {keys}")
            return {k: _size(k, what, v, n) for k, v in value.items()}
        return {k: _size(k, what, value, n) for k in keys}

    sizes, crops = per_key(resize, 2, "resize"), per_key(crop, 4, "crop")
    out = {}
    for key in dict.fromkeys(list(sizes) + list(crops)):
        shape = frame_shapes[key]
        c = crops.get(key)
        h, w = sizes.get(key, (c[2], c[3]) if c else (shape[1], shape[2]))
        fr = FrameResize(h, w, c)  # type: ignore[arg-type]
        fr.check(key, int(shape[1]), int(shape[2]))
        out[key] = fr
    return out


def resize_frame(frame: np.ndarray, fr: FrameResize) -> np.ndarray:
    """One uint8 frame ``(H, W)`` or ``(H, W, C)`` cropped and resized bilinearly (Pillow's
    ``Image.resize`` with ``BILINEAR``, antialiased when shrinking), same dtype and channels."""
    from PIL import Image

    top, left, h, w = fr.region(frame.shape[0], frame.shape[1])
    part = frame[top:top + h, left:left + w]
    if part.shape[:2] == (fr.height, fr.width):
        return np.ascontiguousarray(part)
    squeeze = part.ndim == 3 and part.shape[2] == 1
    img = Image.fromarray(np.ascontiguousarray(part[..., 0] if squeeze else part))
    out = np.asarray(img.resize((fr.width, fr.height), Image.BILINEAR))
    return out[..., None] if squeeze else out
