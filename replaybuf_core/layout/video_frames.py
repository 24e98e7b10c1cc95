"""Decoded PyAV video frames as NumPy pixels, safe in a forked child.

PyAV ≥ 17 converts frames with libswscale contexts that run *slice threads* by default
(``threads=0``: one per core), and PyAV 19 keeps one such context per Python thread for the
thread's life (``VideoFrame.reformat``'s thread-local reformatter).  A context made before a
``fork()`` owns threads the child does not have: the child hangs for ever in
``sws_freeContext`` → ``avpriv_slicethread_free`` → ``pthread_cond_destroy`` as soon as it frees
the context (a pool thread's thread state is cleared in the child) or scales with it (it waits for
the missing workers).  That is any DataLoader worker or multiprocessing child forked after a video
import or a read of a video store.

So every conversion of ours goes through :func:`rgb24`: a reformatter of our own per thread, asked
for ``threads=1`` — no slice threads exist, so the context may be used or freed in any process.  Our
chunks are decoded one per pool thread already, so the one-thread conversion costs nothing in
throughput.  PyAV < 17 has no ``threads`` argument and converts on the calling thread anyway.

Lives in ``layout`` because the formats (top floor) and the backends' video codec both use it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["rgb24", "rgb24_resized"]

_local = threading.local()
_threads_kw: dict[str, int] | None = None  # {"threads": 1} where PyAV takes it, {} where it does not


def _reformatter() -> Any:
    fmt = getattr(_local, "reformatter", None)
    if fmt is None:
        from av.video.reformatter import VideoReformatter

        fmt = _local.reformatter = VideoReformatter()
    return fmt


def rgb24(frame: Any, height: int | None = None, width: int | None = None) -> np.ndarray:
    """The pixels of a decoded PyAV ``VideoFrame`` as a new uint8 ``(H, W, 3)`` RGB array — the same
    values as ``frame.to_ndarray(format="rgb24")`` (libswscale's conversion with PyAV's defaults:
    bilinear, the frame's colorspace and range), converted on the calling thread only; with
    ``height`` and ``width``, scaled to that size in the same libswscale pass (bilinear).

    Raises what PyAV raises for a frame it cannot convert (e.g. ``ValueError``)."""
    global _threads_kw
    fmt = _reformatter()
    size = {} if height is None else {"width": int(width), "height": int(height)}
    if _threads_kw is None:
        try:
            out = fmt.reformat(frame, format="rgb24", threads=1, **size)
            _threads_kw = {"threads": 1}
        except TypeError:  # PyAV < 17: no threads argument, no slice threads either
            _threads_kw = {}
            out = fmt.reformat(frame, format="rgb24", **size)
    else:
        out = fmt.reformat(frame, format="rgb24", **_threads_kw, **size)
    return out.to_ndarray()


def rgb24_resized(frame: Any, fr: Any) -> np.ndarray:
    """:func:`rgb24` of ``frame`` cropped and resized as the
    :class:`~replaybuf_core.layout.frame_resize.FrameResize` ``fr`` says, in one libswscale pass:
    the whole frame is scaled so the crop region becomes ``fr.height`` × ``fr.width``, then the
    region is cut out (its corner rounded to the nearest pixel)."""
    top, left, h, w = fr.region(frame.height, frame.width)
    if (top, left, h, w) == (0, 0, frame.height, frame.width):
        return rgb24(frame, fr.height, fr.width)
    sy, sx = fr.height / h, fr.width / w
    full_h, full_w = max(fr.height, round(frame.height * sy)), max(fr.width, round(frame.width * sx))
    y0, x0 = min(round(top * sy), full_h - fr.height), min(round(left * sx), full_w - fr.width)
    return np.ascontiguousarray(rgb24(frame, full_h, full_w)[y0:y0 + fr.height, x0:x0 + fr.width])
