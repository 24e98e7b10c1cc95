"""Which data keys hold camera frames: uint8 steps of shape (H, W, C) with C in 1, 3, 4 — the keys
the torch datasets convert to channels-first floats, statistics summarise per channel, and
``replaybuf rechunk --compressor '*=...'`` leaves on their image codec."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["is_frames", "frame_keys"]


def is_frames(shape: Sequence[int], dtype: Any) -> bool:
    """True for an array of shape (T, H, W, C), C in (1, 3, 4), dtype uint8."""
    return np.dtype(dtype) == np.uint8 and len(shape) == 4 and shape[-1] in (1, 3, 4)


def frame_keys(buffer: Any, keys: Sequence[str] | None = None) -> list[str]:
    """The frame keys among ``keys`` (default every data key) of ``buffer``, in order — by the dtype
    each is stored in (``buffer.dtype_of(key, "stored")`` where the buffer has it: an imported float
    source's frames are stored, and count, as uint8 frames)."""
    keys = list(buffer.keys()) if keys is None else list(keys)
    of = getattr(buffer, "dtype_of", None)
    return [k for k in keys if is_frames(tuple(buffer[k].shape), of(k, "stored") if callable(of) else buffer[k].dtype)]
