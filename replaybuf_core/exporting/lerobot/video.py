"""A LeRobot camera file: episodes' frames appended to one mp4 (PyAV), as LeRobot's writer encodes
them, and read back frame by frame for verification.

LeRobot's defaults (``lerobot/datasets/video_utils.py``, ``encode_video_frames``): ``libsvtav1``,
``yuv420p``, GOP ``g=2``, ``crf=30``; SVT-AV1 preset 12 is used here (LeRobot leaves the encoder's
own default; 12 is the fastest and what our benchmarks call LeRobot's AV1).  H.264 (``libx264``,
``g=2``, crf 23 by default) is the alternative.  Frames get pts ``0, 1, 2...`` in a time base of
``1/fps``, so a frame's timestamp is its position in the file over fps and an episode's
``from_timestamp`` is the frames before it over fps.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

from ...layout.video_frames import rgb24

__all__ = ["CODECS", "DEFAULT_CRF", "VideoFile", "decode_frames"]

#: info.json's ``video.codec`` → PyAV encoder
CODECS = {"av1": "libsvtav1", "h264": "libx264"}
DEFAULT_CRF = {"av1": 30, "h264": 23}
GOP = 2


def _av():
    try:
        import av
    except ImportError:
        raise ImportError("the LeRobot export encodes video with PyAV: pip install 'replaybuf[lerobot]'") from None
    return av


def fps_fraction(fps: float) -> Fraction:
    """``fps`` as a fraction (29.97 → 30000/1001)."""
    return Fraction(fps).limit_denominator(1001)


class VideoFile:
    """One mp4 being written: ``append(frames)`` encodes ``(T, H, W, 3)`` uint8 RGB frames after those
    already in it; ``frames`` counts them and ``bytes`` the packets muxed so far."""

    def __init__(self, path: str | os.PathLike, codec: str, crf: int, fps: float, height: int, width: int):
        av = _av()
        os.makedirs(os.path.dirname(os.fspath(path)), exist_ok=True)
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1's banner on stderr: errors only
        self._container = av.open(os.fspath(path), "w", format="mp4")
        rate = fps_fraction(fps)
        stream = self._container.add_stream(CODECS[codec], rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = 1 / rate
        stream.options = {"g": str(GOP), "crf": str(int(crf)), **({"preset": "12"} if codec == "av1" else {})}
        self._stream, self.frames, self.bytes = stream, 0, 0

    def append(self, frames: np.ndarray) -> None:
        av = _av()
        for image in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = self.frames
            self.frames += 1
            self._mux(self._stream.encode(frame))

    def _mux(self, packets) -> None:
        for p in packets:
            self.bytes += p.size
            self._container.mux(p)

    def close(self) -> None:
        self._mux(self._stream.encode(None))
        self._container.close()


def decode_frames(path: str | os.PathLike):
    """Yield ``(pts seconds, (H, W, 3) uint8 RGB)`` of every frame of the mp4 at ``path``, in
    presentation order (PyAV's decode: the reader LeRobot's torchcodec/pyav backends agree with)."""
    av = _av()
    with av.open(os.fspath(path)) as c:
        stream = c.streams.video[0]
        for frame in c.decode(stream):
            yield float(frame.pts * stream.time_base), rgb24(frame)
