"""Video-chunk array→bytes serializer for Zarr v3 camera arrays: a chunk of G frames is one closed GOP.

``"replaybuf.video"`` stores each chunk — ``G`` consecutive uint8 RGB frames ``(G, H, W, 3)``, ``G`` the
codec's ``gop`` — as the compressed packets of one H.264 or AV1 group of pictures that starts with a key
frame and refers to nothing outside itself, so every chunk decodes on its own (random access at chunk
granularity, as zarr needs).  The bytes are a small container (:mod:`replaybuf_zarr.codecs.video_chunk`),
not an mp4: no index, no timestamps — the array's row is the frame's step.

Encoding and decoding go through PyAV (FFmpeg's libx264 / libsvtav1 encoders, the h264 / libdav1d
decoders; ``pip install 'replaybuf[video]'``), one thread per chunk: the fast reader decodes the chunks of
a batch on its thread pool and caches each decoded chunk, so a window touching a chunk pays for its G
frames once.  Frames are converted RGB → YUV 4:2:0 (or 4:4:4 for H.264) with swscale's defaults (BT.601)
and back, so the codec is **lossy** even at the lowest crf: the imports report PSNR like JPEG's.

Configuration (``zarr.json``): ``codec`` (``"h264"`` / ``"av1"``), ``crf`` (the encoder's constant rate
factor: lower is better and larger; H.264 0..51, default 18; AV1 1..63, default 30), ``gop`` (frames per
chunk, default 8), ``preset`` (encoder speed: x264's names, default ``"medium"``; SVT-AV1's 0..13,
default ``"10"``), ``tune`` (x264's ``tune``, default ``"fastdecode"``: no CABAC or deblocking, about
twice as fast to decode; ``""`` for none; AV1 has none), ``pix_fmt`` (``"yuv420p"``; H.264 also
``"yuv444p"``).  Defaults chosen by measurement on natural 640×480 frames (``benchmarks/frames_bench.py``,
``benchmarks/natural_training_bench.py``): H.264 G 8 crf 18 ``fastdecode`` is about a third of
LeRobot's AV1 (G 2, crf 30) bytes at a higher PSNR and decodes in about a millisecond a frame.

Registered with zarr at import and through the ``zarr.codecs`` entry point, like the image codecs, so
plain zarr-python reads these arrays when replaybuf (and PyAV) are installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from zarr.registry import register_codec

from replaybuf_core.layout import video_packets
from replaybuf_core.layout.video_frames import rgb24, rgb24_resized
from replaybuf_core.layout.frame_choice import VIDEO_PIX_FMTS

from .frame_codec import FrameCodec, check_int
from .video_chunk import Segment, pack_chunk, splice, unpack_chunk

__all__ = ["CODEC_NAME", "DEFAULTS", "VIDEO_CODECS", "VideoCodec"]

#: Name under which the codec is written to ``zarr.json`` and registered in zarr.
CODEC_NAME = "replaybuf.video"

#: The bitstreams this codec writes: name → (FFmpeg encoder, crf range).
VIDEO_CODECS = {"h264": ("libx264", (0, 51)), "av1": ("libsvtav1", (1, 63))}

#: Per bitstream: default crf, preset, tune (see the module docstring for how they were chosen).
DEFAULTS = {"h264": {"crf": 18, "preset": "medium", "tune": "fastdecode"},
            "av1": {"crf": 30, "preset": "10", "tune": ""}}

#: Default frames per chunk (GOP length).
DEFAULT_GOP = 8

_PIX_FMTS = VIDEO_PIX_FMTS
_X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower",
                 "veryslow", "placebo")
_X264_TUNES = ("", "film", "animation", "grain", "stillimage", "fastdecode", "zerolatency")


def _av() -> Any:
    try:
        import av
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the replaybuf.video frame codec needs PyAV to encode and decode video chunks: "
            "pip install 'replaybuf[video]'") from exc
    return av


@lru_cache(maxsize=None)
def _decoder_name(codec: str) -> str:
    """FFmpeg's software decoder of a bitstream: for AV1 dav1d (PyAV's wheels have it) or libaom —
    FFmpeg's native ``av1`` decoder only drives hardware."""
    av = _av()
    for name in {"av1": ("libdav1d", "libaom-av1")}.get(codec, (codec,)):
        try:
            av.codec.Codec(name, "r")
            return name
        except Exception:  # noqa: BLE001 - PyAV raises its own error types for unknown codecs
            continue
    raise ValueError(f"video chunk: PyAV has no decoder for {codec!r}")


def decode_segment(segment: Segment, height: int, width: int, kept: Sequence[int] | None = None,
                   fr: Any = None) -> list[np.ndarray]:
    """The kept frames of one segment (``segment.take`` uint8 ``(H, W, 3)`` RGB arrays), decoded by a
    fresh single-threaded decoder — or only those at the places ``kept`` (ascending, within
    ``0..take-1``), decoding no packet past the last of them (a random read of one frame of a GOP
    decodes up to it, not the whole segment); with ``fr`` (a
    :class:`~replaybuf_core.layout.frame_resize.FrameResize`) each frame cropped and resized by
    libswscale in its RGB conversion.

    Raises ValueError: the packets do not decode (corrupt data), decode to fewer frames than
    ``skip + take`` (than needed, for ``kept``), or to frames of another size than ``height`` × ``width``.
    """
    want = list(range(segment.take)) if kept is None else [int(k) for k in kept]
    if segment.codec == video_packets.BLANK:  # padding past the array's end: black frames, no packets
        if segment.packets or segment.skip:
            raise ValueError("video chunk: a blank segment holds packets or skips frames (damaged)")
        size = (height, width) if fr is None else (fr.height, fr.width)
        return [np.zeros(size + (3,), np.uint8)] * len(want)
    if not want:
        return []
    av = _av()
    ctx = av.CodecContext.create(_decoder_name(segment.codec), "r")
    ctx.thread_count = 1
    if segment.extradata:
        ctx.extradata = segment.extradata
    frames: list = []
    needed = segment.skip + (segment.take if kept is None else want[-1] + 1)
    try:
        for p in segment.packets:
            frames += ctx.decode(av.Packet(p))
            if kept is not None and len(frames) >= needed:  # presentation order is decode order here
                break
        else:
            frames += ctx.decode(None)
    except av.error.FFmpegError as exc:
        raise ValueError(f"video chunk: the {segment.codec} packets do not decode ({exc})") from None
    if len(frames) < needed:
        raise ValueError(f"video chunk: its {segment.codec} packets decode to {len(frames)} frames, the chunk "
                         f"says {segment.skip} + {segment.take}")
    out = []
    for k in want:
        f = frames[segment.skip + k]
        if (f.height, f.width) != (height, width):
            raise ValueError(f"video chunk: a frame is {f.height}x{f.width} px, the chunk shape expects "
                             f"{height}x{width} px")
        out.append(rgb24(f) if fr is None else rgb24_resized(f, fr))
    return out


@dataclass(frozen=True)
class VideoCodec(FrameCodec):
    """Zarr v3 serializer storing each chunk of ``gop`` uint8 RGB frames as one closed GOP (lossy).

    Parameters
    ----------
    codec : {"h264", "av1"}, default "h264"
    crf : int, optional
        Constant rate factor (H.264 0..51, default 18; AV1 1..63, default 30).
    gop : int, default 8
        Frames per chunk (1..1024); the array's chunks are ``(gop, H, W, 3)``.
    preset : str, optional
        Encoder speed (x264: ``"ultrafast"`` .. ``"placebo"``, default ``"medium"``; SVT-AV1: ``"0"``..
        ``"13"``, default ``"10"``).
    tune : str, optional
        x264's tune (default ``"fastdecode"``; ``""``: none).  Must be ``""`` for AV1.
    pix_fmt : str, default "yuv420p"
        The coded pixel format (``"yuv444p"``: H.264 only, full-resolution colour).

    Array layout: dtype uint8, ``(T, H, W, 3)``; chunks ``(gop, H, W, 3)``; even ``H`` and ``W`` for
    4:2:0; sides up to 8192 px.  A chunk past the last step is padded by zarr with its fill value (black
    frames), which only costs bits.

    Raises TypeError (a setting of the wrong type; dtype not uint8) and ValueError (an unknown codec,
    preset, tune or pixel format, crf or gop out of range; rank, channels other than 3, frames per chunk
    other than ``gop``, an odd side in 4:2:0) — see :class:`~replaybuf_zarr.codecs.frame_codec.FrameCodec`.
    """

    codec_name: ClassVar[str] = CODEC_NAME
    config_keys: ClassVar[tuple[str, ...]] = ("codec", "crf", "gop", "preset", "tune", "pix_fmt")
    channels: ClassVar[tuple[int, ...]] = (3,)
    max_side: ClassVar[int] = 8192
    max_side_reason: ClassVar[str] = " (the limit replaybuf's video chunks are tested to)"
    lossless: ClassVar[bool] = False

    codec: str
    crf: int
    gop: int
    preset: str
    tune: str
    pix_fmt: str

    def __init__(self, *, codec: str = "h264", crf: int | None = None, gop: int = DEFAULT_GOP,
                 preset: str | None = None, tune: str | None = None, pix_fmt: str = "yuv420p") -> None:
        if codec not in VIDEO_CODECS:
            raise ValueError(f"VideoCodec codec must be one of {sorted(VIDEO_CODECS)}, got {codec!r}")
        low, high = VIDEO_CODECS[codec][1]
        defaults = DEFAULTS[codec]
        crf = check_int("VideoCodec", "crf", defaults["crf"] if crf is None else crf, low, high)
        gop = check_int("VideoCodec", "gop", gop, 1, 1024)
        preset = defaults["preset"] if preset is None else preset
        tune = defaults["tune"] if tune is None else tune
        for key, value in (("preset", preset), ("tune", tune), ("pix_fmt", pix_fmt)):
            if not isinstance(value, str):
                raise TypeError(f"VideoCodec {key} must be a string, got {value!r}")
        if codec == "h264":
            if preset not in _X264_PRESETS:
                raise ValueError(f"VideoCodec preset for h264 must be one of {_X264_PRESETS}, got {preset!r}")
            if tune not in _X264_TUNES:
                raise ValueError(f"VideoCodec tune for h264 must be one of {_X264_TUNES}, got {tune!r}")
        else:
            if preset not in tuple(str(i) for i in range(14)):
                raise ValueError(f"VideoCodec preset for av1 must be '0'..'13' (SVT-AV1), got {preset!r}")
            if tune:
                raise ValueError(f"VideoCodec tune is an x264 setting; av1 takes '', got {tune!r}")
        if pix_fmt not in _PIX_FMTS[codec]:
            raise ValueError(f"VideoCodec pix_fmt for {codec} must be one of {_PIX_FMTS[codec]}, got {pix_fmt!r}")
        for key, value in (("codec", codec), ("crf", crf), ("gop", gop), ("preset", preset), ("tune", tune),
                           ("pix_fmt", pix_fmt)):
            object.__setattr__(self, key, value)

    @property
    def frames_per_chunk(self) -> int:  # type: ignore[override]
        """Frames per chunk: the GOP length."""
        return self.gop

    def check_chunk_shape(self, chunk_shape: tuple[int, ...]) -> None:  # type: ignore[override]
        """Check one chunk shape: ``(gop, H, W, 3)``, sides in range and even for 4:2:0 (ValueError)."""
        self._check_frames_shape(chunk_shape, self.gop)
        if len(chunk_shape) == 3:
            raise self._channel_error(tuple(chunk_shape) + (1,), "chunk shape")
        if self.pix_fmt == "yuv420p" and (chunk_shape[1] % 2 or chunk_shape[2] % 2):
            raise ValueError(f"VideoCodec with 4:2:0 chroma needs even frame sides; chunk shape "
                             f"{tuple(chunk_shape)} has a {chunk_shape[1]}x{chunk_shape[2]} px frame")

    def evolve_from_array_spec(self, array_spec: Any) -> VideoCodec:
        """As :meth:`FrameCodec.evolve_from_array_spec`, and the (inner) chunk shape checked."""
        super().evolve_from_array_spec(array_spec)
        if len(tuple(array_spec.shape)) == 3:
            raise self._channel_error(tuple(array_spec.shape) + (1,), "shape")
        return self

    # -- one chunk ---------------------------------------------------------------------------------

    def encode_frame(self, chunk: np.ndarray) -> bytes:
        """Encode one chunk — uint8 ``(gop, H, W, 3)`` RGB — to the bytes of one closed GOP; or, when a
        pass-through import registered source packets that decode to exactly these frames
        (:mod:`replaybuf_core.layout.video_packets`), to those packets, unchanged.

        Raises TypeError (dtype) / ValueError (shape) like :meth:`validate`."""
        chunk = np.asarray(chunk)
        self._check_dtype(chunk.dtype)
        self.check_chunk_shape(chunk.shape)
        if video_packets.registered_frames():
            found = video_packets.claim(chunk)
            if found is not None:
                return pack_chunk([Segment(*s) for s in found])
        av = _av()
        encoder, _ = VIDEO_CODECS[self.codec]
        if self.codec == "av1":
            os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints a banner per encoder unless told
        ctx = av.CodecContext.create(encoder, "w")
        ctx.width, ctx.height = int(chunk.shape[2]), int(chunk.shape[1])
        ctx.pix_fmt = self.pix_fmt
        ctx.time_base = Fraction(1, 30)
        ctx.framerate = Fraction(30, 1)
        ctx.gop_size = self.gop
        ctx.thread_count = 1
        options = {"crf": str(self.crf), "preset": self.preset}
        if self.tune:
            options["tune"] = self.tune
        ctx.options = options
        packets = []
        for i, frame in enumerate(chunk):
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            vf.pts = i
            packets += ctx.encode(vf)
        packets += ctx.encode(None)
        return pack_chunk([Segment(self.codec, b"", 0, self.gop, tuple(bytes(p) for p in packets))])

    def splice_chunk(self, pieces: Sequence[tuple[bytes, int, int]], frames: int) -> bytes | None:
        """One chunk of ``frames`` frames made of ``pieces`` (``(chunk bytes, lo, hi)``: frames
        ``[lo, hi)`` of a stored chunk, in order; padded with black frames to ``frames``) by copying
        packets: each piece's segments keep their packets from the keyframe on and narrow ``skip`` /
        ``take`` (:func:`~replaybuf_zarr.codecs.video_chunk.splice`), so no frame is decoded or
        encoded and every frame decodes bit for bit as before; a chunk costs the bytes of the GOPs
        its frames come from.  None when more than 255 segments would be needed.

        Raises ValueError: bytes that are not a video chunk, pieces out of their chunk or holding
        more than ``frames`` frames."""
        segments = splice([(unpack_chunk(data), int(lo), int(hi)) for data, lo, hi in pieces], int(frames))
        return None if segments is None else pack_chunk(segments)

    def decode_resized(self, data: bytes, chunk_shape: tuple[int, ...], rows: list[int], fr: Any) -> np.ndarray:
        """:meth:`decode_rows` with each frame cropped and resized as ``fr`` says, by libswscale in the
        RGB conversion (no full-size RGB frame is made)."""
        return self.decode_rows(data, chunk_shape, rows, fr)

    def decode_rows(self, data: bytes, chunk_shape: tuple[int, ...], rows: Sequence[int], fr: Any = None) -> np.ndarray:
        """Only the frames at ``rows`` (ascending distinct places in the chunk, ``0..G-1``) of one
        chunk, as uint8 ``(len(rows), H, W, 3)``: equal to ``decode_frame(data, chunk_shape)[rows]``,
        but only the segments holding them are decoded, each up to the last frame wanted (a window's
        two frames of a pass-through G1 chunk decode 2–3 frames, not 8).

        Raises ValueError like :meth:`decode_frame`, and for rows outside the chunk.
        """
        chunk_shape = tuple(int(s) for s in chunk_shape)
        rows = [int(r) for r in rows]
        if any(b <= a for a, b in zip(rows, rows[1:])) or (rows and not 0 <= rows[0] <= rows[-1] < chunk_shape[0]):
            raise ValueError(f"video chunk: rows {rows} are not ascending places in a chunk of {chunk_shape[0]}")
        out = np.empty((len(rows),) + (chunk_shape[1:] if fr is None else (fr.height, fr.width, chunk_shape[3])),
                       dtype=np.uint8)
        start, i = 0, 0
        for segment in unpack_chunk(data):
            end = start + segment.take
            j = i
            while j < len(rows) and rows[j] < end:
                j += 1
            if j > i:
                for k, frame in enumerate(decode_segment(segment, chunk_shape[1], chunk_shape[2],
                                                         [r - start for r in rows[i:j]], fr), start=i):
                    out[k] = frame
                i = j
            start = end
        if start != chunk_shape[0]:
            raise ValueError(f"video chunk: it holds {start} frames, the chunk shape {chunk_shape} expects "
                             f"{chunk_shape[0]}")
        return out

    def decode_frame(self, data: bytes, chunk_shape: tuple[int, ...]) -> np.ndarray:
        """Decode one chunk's bytes to uint8 frames of exactly ``chunk_shape`` ``(G, H, W, 3)``.

        Raises ValueError: not a video chunk, truncated or damaged bytes, packets that do not decode,
        or a frame count or size other than ``chunk_shape`` says.
        """
        chunk_shape = tuple(int(s) for s in chunk_shape)
        out = np.empty(chunk_shape, dtype=np.uint8)
        row = 0
        for segment in unpack_chunk(data):
            if row + segment.take > chunk_shape[0]:
                raise ValueError(f"video chunk: its segments hold more than the chunk's {chunk_shape[0]} frames")
            for frame in decode_segment(segment, chunk_shape[1], chunk_shape[2]):
                out[row] = frame
                row += 1
        if row != chunk_shape[0]:
            raise ValueError(f"video chunk: it holds {row} frames, the chunk shape {chunk_shape} expects "
                             f"{chunk_shape[0]}")
        return out


register_codec(CODEC_NAME, VideoCodec)
