"""The byte layout of one video chunk: the compressed packets of G frames, decodable on their own.

A chunk holds one or more *segments*; each segment is a run of packets that one fresh decoder turns
into frames: its codec (the FFmpeg codec name of the bitstream: ``"h264"``, ``"av1"``, ``"hevc"``...),
the decoder's out-of-band setup (``extradata``: e.g. an mp4's ``avcC`` record; empty for Annex-B H.264
and AV1 OBU streams, which carry their headers in band), the packets in decode order, and which of the
decoded frames (in presentation order) belong to the chunk: ``skip`` frames dropped first, then
``take`` frames kept.  The chunk's frames are the segments' kept frames, in order.

replaybuf's own encoder writes one segment (one closed GOP: skip 0, take G).  Several segments, and
``skip``, let a chunk carry packets copied from another file (a pass-through import,
:mod:`replaybuf_core.layout.video_packets`), whose GOPs need not line up with the chunk grid: each
segment is the source's packets from a keyframe to the last frame it keeps, plus the source stream's
``extradata``.  A segment of codec ``"blank"`` holds no packets and stands for ``take`` black frames
(zarr's padding of a chunk past the array's end).

Layout (little-endian)::

    b"RBVC"  u8 version (1)  u8 n_segments
    per segment:
        u8 len(codec)  codec (ASCII)
        u32 len(extradata)  extradata
        u16 skip  u16 take  u32 n_packets
        u32 size × n_packets
        packet bytes, concatenated

Pure bytes: no PyAV here (:mod:`replaybuf_zarr.codecs.video` decodes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

__all__ = ["BLANK_CODEC", "MAGIC", "MAX_SEGMENTS", "Segment", "pack_chunk", "recut", "splice", "unpack_chunk"]

MAGIC = b"RBVC"
VERSION = 1
#: most segments one chunk holds (the header's u8)
MAX_SEGMENTS = 255
#: codec name of a segment of black padding frames (no packets)
BLANK_CODEC = "blank"


@dataclass(frozen=True)
class Segment:
    """One decoder's run of packets (see the module docstring).

    ``codec``: FFmpeg codec name of the bitstream; ``extradata``: decoder setup bytes (b"" for none);
    ``skip`` / ``take``: decoded frames dropped, then kept (presentation order); ``packets``: the
    compressed packets in decode order.
    """

    codec: str
    extradata: bytes
    skip: int
    take: int
    packets: tuple[bytes, ...]


def pack_chunk(segments: list[Segment] | tuple[Segment, ...]) -> bytes:
    """The chunk bytes of ``segments`` (1..255 of them).

    Raises ValueError: no segments or more than 255, a codec name that is not 1..255 ASCII
    characters, ``skip`` / ``take`` outside 0..65535.
    """
    if not 1 <= len(segments) <= 255:
        raise ValueError(f"a video chunk holds 1..255 segments, got {len(segments)}")
    out = [MAGIC, struct.pack("<BB", VERSION, len(segments))]
    for seg in segments:
        name = seg.codec.encode("ascii")
        if not 1 <= len(name) <= 255:
            raise ValueError(f"video chunk: codec name {seg.codec!r} must be 1..255 ASCII characters")
        for what, v in (("skip", seg.skip), ("take", seg.take)):
            if not 0 <= v <= 0xFFFF:
                raise ValueError(f"video chunk: {what} must be in 0..65535, got {v}")
        out += [struct.pack("<B", len(name)), name, struct.pack("<I", len(seg.extradata)), bytes(seg.extradata),
                struct.pack("<HHI", seg.skip, seg.take, len(seg.packets))]
        out.append(_sizes(len(seg.packets)).pack(*map(len, seg.packets)))
        out += map(bytes, seg.packets)
    return b"".join(out)


def unpack_chunk(data: bytes | memoryview) -> list[Segment]:
    """The segments of chunk bytes written by :func:`pack_chunk`.

    Raises ValueError naming the byte offset: not a video chunk (magic), an unknown version, or a
    chunk shorter or longer than its fields say (truncated or damaged).
    """
    buf = data if type(data) is bytes else bytes(memoryview(data).cast("B"))
    size = len(buf)

    def need(pos: int, n: int, what: str) -> None:
        if n < 0 or pos + n > size:
            raise ValueError(f"video chunk truncated: {what} needs {n} bytes at offset {pos}, the chunk is "
                             f"{size} bytes")

    need(0, 4, "the magic")
    if buf[:4] != MAGIC:
        raise ValueError(f"not a replaybuf video chunk (it starts {buf[:4]!r}, expected {MAGIC!r})")
    need(4, 2, "the header")
    version, n_segments = buf[4], buf[5]
    if version != VERSION:
        raise ValueError(f"video chunk version {version} is not known (this replaybuf reads version {VERSION})")
    pos = 6
    segments = []
    for _ in range(n_segments):
        need(pos, 1, "a codec name length")
        n_name = buf[pos]
        pos += 1
        need(pos, n_name, "a codec name")
        codec = buf[pos:pos + n_name].decode("ascii", errors="replace")
        pos += n_name
        need(pos, 4, "an extradata length")
        (n_extra,) = _U32.unpack_from(buf, pos)
        pos += 4
        need(pos, n_extra, "extradata")
        extradata = buf[pos:pos + n_extra]
        pos += n_extra
        need(pos, 8, "a segment header")
        skip, keep, n_packets = _SEGMENT_HEAD.unpack_from(buf, pos)
        pos += 8
        need(pos, 4 * n_packets, "the packet sizes")
        sizes = _sizes(n_packets).unpack_from(buf, pos)
        pos += 4 * n_packets
        ends = list(accumulate(sizes, initial=pos))
        if ends[-1] > size:  # name the first packet that does not fit
            i = next(i for i in range(n_packets) if ends[i + 1] > size)
            need(ends[i], sizes[i], f"packet {i}")
        packets = tuple(map(buf.__getitem__, map(slice, ends, ends[1:])))
        pos = ends[-1]
        segments.append(Segment(codec, extradata, skip, keep, packets))
    if pos != size:
        raise ValueError(f"video chunk has {size - pos} bytes after its last segment (damaged)")
    return segments


_U32 = struct.Struct("<I")
_SEGMENT_HEAD = struct.Struct("<HHI")


@lru_cache(maxsize=64)
def _sizes(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}I")


def recut(segments: list[Segment] | tuple[Segment, ...], lo: int, hi: int) -> list[Segment]:
    """The segments holding frames ``[lo, hi)`` of a chunk made of ``segments`` (its frames are the
    segments' kept frames, in order), without decoding: each segment overlapping the range is kept
    with all its packets (from its keyframe; with B-frames a frame may need packets after it in
    decode order) and its ``skip`` / ``take`` narrowed to the frames in range.  The frames they
    decode to are bit for bit those frames of the original chunk.

    Raises ValueError: ``0 <= lo < hi <= frames of the chunk`` does not hold.
    """
    total = sum(seg.take for seg in segments)
    if not 0 <= lo < hi <= total:
        raise ValueError(f"video chunk: frames [{lo}, {hi}) are not within its {total} frames")
    out, start = [], 0
    for seg in segments:
        end = start + seg.take
        a, b = max(lo, start), min(hi, end)
        if a < b:
            if seg.codec == BLANK_CODEC:
                out.append(Segment(seg.codec, b"", 0, b - a, ()))
            else:
                out.append(Segment(seg.codec, seg.extradata, seg.skip + (a - start), b - a, seg.packets))
        start = end
    return out


def splice(pieces: list[tuple[list[Segment] | tuple[Segment, ...], int, int]], frames: int) -> list[Segment] | None:
    """One chunk of ``frames`` frames made of ``pieces`` — ``(segments of a chunk, lo, hi)``: frames
    ``[lo, hi)`` of that chunk, in order — padded with black frames (a ``blank`` segment) to
    ``frames``: the segments of :func:`recut` of each piece, a segment continuing the one before it
    (the same packets, its frames next) joined to it.  None when they would need more than
    :data:`MAX_SEGMENTS` segments (the caller re-encodes).

    Raises ValueError: the pieces hold more than ``frames`` frames, or a piece is out of its chunk.
    """
    out: list[Segment] = []
    n = 0
    for segments, lo, hi in pieces:
        for seg in recut(segments, lo, hi):
            n += seg.take
            prev = out[-1] if out else None
            if prev is not None and prev.codec == seg.codec and (
                    seg.codec == BLANK_CODEC or (prev.packets is seg.packets or prev.packets == seg.packets)
                    and prev.extradata == seg.extradata and prev.skip + prev.take == seg.skip):
                out[-1] = Segment(prev.codec, prev.extradata, prev.skip, prev.take + seg.take, prev.packets)
            else:
                out.append(seg)
    if n > frames:
        raise ValueError(f"video chunk: the pieces hold {n} frames, a chunk holds {frames}")
    if n < frames:
        if out and out[-1].codec == BLANK_CODEC:
            last = out[-1]
            out[-1] = Segment(BLANK_CODEC, b"", 0, last.take + frames - n, ())
        else:
            out.append(Segment(BLANK_CODEC, b"", 0, frames - n, ()))
    return out if len(out) <= MAX_SEGMENTS else None
