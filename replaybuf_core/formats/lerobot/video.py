"""Camera frames of LeRobot datasets: decode an mp4 with PyAV and give each row its frame.

Rule (what LeRobot's own loader promises, made strict): a frame's time is ``pts × time_base``
(seconds); the rows of an episode ask for the frames at their query times (v2: the row's
``timestamp``; v3: the episode's ``from_timestamp`` plus the row's ``timestamp``).  Decoding starts
at the keyframe at or before the first query time (a seek) — or goes on from the previous episode
when that one ended just before (v3 files hold many episodes) — and frames before the first query
time are skipped.  From then on the frames must pair with the rows one to one, in order, each
within ``tolerance_s`` of its row (LeRobot's default ``tolerance_s`` is 1e-4 s): an extra frame, a
missing frame or a frame too far from its row is a :class:`VideoMismatchError` naming the episode,
the camera, the row and the two times.  Decoders return frames in presentation order, so B-frames
need nothing special.

RGB frames are ``frame.to_ndarray(format="rgb24")`` (libswscale's conversion of the stored YUV, made
on the calling thread: :func:`replaybuf_core.layout.video_frames.rgb24`);
depth maps (``video.is_depth_map``) are gray frames as uint16 (e.g. 12-bit values 0..4095).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...layout.video_frames import rgb24


class VideoMismatchError(ValueError):
    """The frames of a video do not pair one to one with the rows of an episode."""


def require_av():
    """PyAV, or ImportError naming the extra that installs it."""
    from .layout import require

    return require("av", "reading LeRobot videos")


GRAY_FORMATS = {"gray", "gray10le", "gray12le", "gray16le", "gray10be", "gray12be", "gray16be"}


def frame_array(frame, depth: bool) -> np.ndarray:
    """One decoded PyAV frame as ``(H, W, 3)`` uint8 RGB, or for depth ``(H, W, 1)`` uint16."""
    if not depth:
        return rgb24(frame)
    name = frame.format.name
    if name not in GRAY_FORMATS:
        raise VideoMismatchError(f"a depth video (video.is_depth_map) must hold gray frames; this one holds {name}")
    a = frame.to_ndarray()
    return a.astype(np.uint16, copy=False)[..., None]


def pixel_bits(pix_fmt: str | None) -> int:
    """Bits of the widest component of the pixel format named ``pix_fmt`` (8 for yuv420p, 10 for
    yuv420p10le); 8 when PyAV does not know the name."""
    if not pix_fmt:
        return 8
    av = require_av()
    try:
        return max(int(c.bits) for c in av.VideoFormat(pix_fmt).components)
    except (ValueError, TypeError):
        return 8


@dataclass(frozen=True)
class VideoFacts:
    """What one video file holds, as its stream and first decoded frame say: ``codec`` (FFmpeg's
    canonical name: ``h264``, ``hevc``, ``av1``, ``mpeg4``...) and ``codec_long`` (``"MPEG-4 part 2"``),
    ``pix_fmt`` and its widest component's ``bits``, and ``rotation``: the degrees (counter-clockwise)
    the file's display matrix asks players to rotate its frames by (PyAV's ``VideoFrame.rotation``;
    0 for none)."""

    codec: str
    codec_long: str
    pix_fmt: str | None
    bits: int
    rotation: int


def stream_codec(stream) -> tuple[str, str]:
    """``(canonical name, long name)`` of a PyAV video stream's codec (not its decoder's name:
    ``av1``, not ``libdav1d``)."""
    codec = stream.codec_context.codec
    return str(getattr(codec, "canonical_name", None) or codec.name), str(codec.long_name or codec.name)


def facts_of(stream, frame) -> VideoFacts:
    """The :class:`VideoFacts` of ``stream`` given its first decoded ``frame``."""
    pix = stream.codec_context.pix_fmt
    return VideoFacts(*stream_codec(stream), pix, pixel_bits(pix), int(round(float(getattr(frame, "rotation", 0) or 0))))


def probe_video(path: str) -> VideoFacts | None:
    """The :class:`VideoFacts` of the video file ``path`` (opened and its first frame decoded), or
    None when it does not open or holds no frame (the read that needs it names the problem)."""
    av = require_av()
    try:
        with av.open(path) as c:
            stream = c.streams.video[0]
            for frame in c.decode(stream):
                return facts_of(stream, frame)
    except Exception:  # noqa: BLE001 - damaged or missing: said by the read that needs the file
        return None
    return None


class VideoReader:
    """Frames of one mp4 file, matched to query times (see the module docstring).  Keeps the file
    open and its decoder positioned, so consecutive episodes of one v3 file decode each frame once.

    Args:
        path: the mp4 file.
        camera: the feature key (for messages).
        depth: decode gray frames as uint16 depth.
        tolerance_s: how far (seconds) a frame may sit from its row's query time.
        passthrough: demux and decode packet by packet, and register each frame handed out with the
            packets it decodes from (:mod:`.passthrough`, :mod:`replaybuf_core.layout.video_packets`).
    """

    def __init__(self, path: str, camera: str, depth: bool, tolerance_s: float, passthrough: bool = False):
        av = require_av()
        self.path, self.camera, self.depth, self.tol = path, camera, depth, float(tolerance_s)
        self.passthrough = bool(passthrough)
        self._records: dict = {}  # pts → PacketRecord (pass-through)
        try:
            self._container = av.open(path)
        except Exception as exc:
            raise ValueError(f"camera {camera}: cannot open video {path}: {exc}") from exc
        if not self._container.streams.video:
            raise ValueError(f"camera {camera}: {path} holds no video stream")
        self._stream = self._container.streams.video[0]
        self._stream.thread_type = "AUTO"
        self._tb = self._stream.time_base
        self._frames: Iterator | None = None
        self._last_time = -math.inf  # time of the last frame handed out or skipped
        #: the file's codec, bit depth and rotation, once a frame was decoded (the import report says
        #: what the stored frames leave out of them: :mod:`.camera_notes`)
        self.facts: VideoFacts | None = None

    def first_frame_time(self) -> float | None:
        """Time (s) of the file's first frame (a separate decode; for messages and alignment)."""
        av = require_av()
        with av.open(self.path) as c:
            for f in c.decode(c.streams.video[0]):
                return float(f.pts * f.time_base) if f.pts is not None else None
        return None

    def _seek(self, t: float) -> None:
        target = max(0, int(math.floor((t - self.tol) / self._tb)))
        self._container.seek(target, stream=self._stream, backward=True, any_frame=False)
        if self.passthrough:
            from .passthrough import tracked_frames

            self._records = {}
            self._frames = tracked_frames(self._container, self._stream, self._records)
        else:
            self._frames = self._container.decode(self._stream)
        self._last_time = -math.inf

    def _next(self, episode: int, row: int):
        try:
            return next(self._frames)
        except StopIteration:
            return None
        except Exception as exc:  # the decoder's own errors (damaged data) name no file
            raise VideoMismatchError(f"episode {episode}, camera {self.camera}, row {row}: decoding {self.path} "
                                     f"failed: {exc}") from exc

    def frames(self, times: np.ndarray, episode: int, max_rows: int, hint: str = "",
               first_row: int = 0, previous: float | None = None) -> Iterator[np.ndarray]:
        """The frames of the rows whose query times (seconds, strictly increasing) are ``times``, in
        arrays of at most ``max_rows`` frames.  A read may start mid-episode: ``times[0]`` is row
        ``first_row`` of the episode (for messages), and ``previous`` the query time of the row
        before it (a frame skipped between the two is an extra frame, as in a whole read).  Raises
        VideoMismatchError (see the module docstring), with ``hint`` appended when the frames do not
        match."""
        times = [float(t) for t in np.asarray(times, dtype=np.float64)]
        n = len(times)
        if n == 0:
            return
        tol = self.tol
        # go on decoding when the previous episode ended just before this one; else seek
        if self._frames is None or not (self._last_time < times[0] - tol) or \
                times[0] - self._last_time > 2.0 + tol:
            self._seek(float(times[0]))
        i = 0
        block: list[np.ndarray] = []
        while i < n:
            frame = self._next(episode, first_row + i)
            if frame is None:
                raise VideoMismatchError(self._ended_message(episode, i, times, first_row) + hint)
            if frame.pts is None:
                raise VideoMismatchError(f"episode {episode}, camera {self.camera}: {self.path} has a frame "
                                         f"without a presentation time (row {first_row + i})")
            t = float(frame.pts * self._tb)
            if t <= self._last_time:
                raise VideoMismatchError(f"episode {episode}, camera {self.camera}: frame times of {self.path} "
                                         f"do not increase ({self._last_time!r} s then {t!r} s, at row {first_row + i})")
            if abs(t - times[i]) > tol and (i == 0 or t - times[i - 1] > times[i] - t) and \
                    (i + 1 == n or times[i + 1] - t > t - times[i]) and not (i == 0 and t < times[0]):
                raise VideoMismatchError(
                    f"episode {episode}, camera {self.camera}, row {first_row + i}: its frame in {self.path} is at {t!r} s, "
                    f"{t - times[i]:+.3g} s from the row's time {times[i]!r} s (tolerance {tol} s)" + hint)
            if t < times[i] - tol:
                if i == 0 and (previous is None or t <= previous + tol):  # from the keyframe before row 0
                    self._last_time = t
                    continue
                if i == 0:
                    raise VideoMismatchError(
                        f"episode {episode}, camera {self.camera}, row {first_row}: an extra frame at {t!r} s sits "
                        f"between rows {first_row - 1} ({previous!r} s) and {first_row} ({times[0]!r} s) in "
                        f"{self.path} (tolerance {tol} s)" + hint)
                raise VideoMismatchError(
                    f"episode {episode}, camera {self.camera}, row {first_row + i}: an extra frame at {t!r} s sits between "
                    f"rows {first_row + i - 1} ({times[i - 1]!r} s) and {first_row + i} ({times[i]!r} s) in {self.path} (tolerance "
                    f"{tol} s)" + hint)
            if t > times[i] + tol:
                raise VideoMismatchError(
                    f"episode {episode}, camera {self.camera}, row {first_row + i}: no frame at the row's time {times[i]!r} s "
                    f"(the next frame of {self.path} is at {t!r} s; tolerance {tol} s)" + hint)
            self._last_time = t
            if self.facts is None:
                self.facts = facts_of(self._stream, frame)
            try:
                block.append(frame_array(frame, self.depth))
            except VideoMismatchError as exc:
                raise VideoMismatchError(f"episode {episode}, camera {self.camera}: {self.path}: {exc}") from None
            if self.passthrough:
                self._register(block[-1], frame.pts)
            i += 1
            if len(block) >= max_rows:
                yield np.stack(block)
                block = []
        if block:
            yield np.stack(block)

    def _register(self, pixels: np.ndarray, pts: int) -> None:
        """Hand the packets of the frame at ``pts`` to the video codec, addressed by its ``pixels``."""
        from replaybuf_core.layout.video_packets import register

        record = self._records.pop(pts, None)
        if record is not None:  # none: the codec re-encodes the chunk, and the import's check says so
            register(pixels, record)

    def _ended_message(self, episode: int, i: int, times: np.ndarray, first_row: int = 0) -> str:
        last = f"{self._last_time!r} s" if self._last_time > -math.inf else "before the first row"
        return (f"episode {episode}, camera {self.camera}, row {first_row + i}: {self.path} ends (last frame at "
                f"{last}) but rows {first_row + i}..{first_row + len(times) - 1} ({times[i]!r} s .. {times[-1]!r} s) "
                "have no frame")

    def close(self) -> None:
        """Close the file (the reader cannot be used afterwards)."""
        self._frames = None
        self._container.close()
