"""The hand-over of a source video's compressed packets to the video frame codec (pass-through import).

A pass-through import stores a camera's frames as the packets of the source's own video instead of
decoding and re-encoding them.  The import pipeline hands the writer *pixels* (it checks every stored
row against them), and the writer hands the frame codec chunks of pixels; so the packets travel beside
the pixels, addressed by content: the source, as it decodes a frame, :func:`register` s the frame's
pixels with a :class:`PacketRecord` — the packets of the frame's GOP from its keyframe, and the frame's
place in it — and the video codec, asked to encode a chunk, :func:`claim` s a record for every frame.
Any record whose frame decoded to exactly these pixels is a correct encoding of them (identical frames
may take each other's records), so the hand-over needs no position bookkeeping; a chunk with a frame
no record holds is encoded by the codec itself (lossy), and the import's bit-for-bit check of every
stored row says so — never silently.

Records are kept until evicted, oldest first, past :data:`MAX_FRAMES` frames or :data:`MAX_BYTES`
bytes of packets (far more than the writer holds in flight: a chunk the writer re-encodes because an
episode ended inside it is claimed again), and they are all dropped when the import's :func:`session`
ends.  Thread-safe: the source registers from the prefetch thread, the codec claims on the codec pool.

Lives in ``layout`` because both sides import it: the formats (top floor) and the backends' codecs.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from .import_sessions import ImportSessions
__all__ = ["GopPackets", "PacketRecord", "register", "claim", "clear", "session", "registered_frames", "BLANK"]

#: Frames whose records are kept at most (oldest evicted first).
MAX_FRAMES = 1 << 16
#: Bytes of the registered frames' own packets kept at most (oldest evicted first).
MAX_BYTES = 256 * 2**20
#: The codec name of a segment of black frames with no packets (the padding past an array's end).
BLANK = "blank"


@dataclass(eq=False)
class GopPackets:
    """The packets of one source GOP in decode order, from its keyframe; grows as the source demuxes.

    ``codec``: FFmpeg codec name of the bitstream (``"h264"``, ``"av1"``); ``extradata``: the stream's
    decoder setup (an mp4's ``avcC`` / ``av1C``); ``packets``: bytes of each packet."""

    codec: str
    extradata: bytes
    packets: list[bytes] = field(default_factory=list)


@dataclass(frozen=True)
class PacketRecord:
    """Where a frame's packets are: ``gop`` and the frame's index in it (presentation order equals decode
    order: sources with reordered frames are not passed through)."""

    gop: GopPackets
    index: int


_lock = threading.Lock()
_records: OrderedDict[bytes, deque[PacketRecord]] = OrderedDict()
_digest_of: dict[tuple[GopPackets, int], bytes] = {}  # (GOP, frame) -> the digest of its pixels
_order: deque[tuple[bytes, int, PacketRecord]] = deque()  # (digest, packet bytes, record) in registration order
_bytes = 0


def _digest(frame: np.ndarray) -> bytes:
    frame = np.ascontiguousarray(frame)
    return hashlib.sha1(frame.data, usedforsecurity=False).digest() + repr(frame.shape).encode()


def register(frame: np.ndarray, record: PacketRecord) -> None:
    """Say that ``record``'s packets decode (standalone, from the GOP's keyframe) to ``frame``: uint8
    ``(H, W, 3)`` RGB pixels as the import stores them.  A no-op outside a :func:`session` (a source
    read for another purpose keeps nothing)."""
    global _bytes
    if not _sessions:
        return
    key = _digest(frame)
    size = len(record.gop.packets[record.index])
    with _lock:
        _records.setdefault(key, deque()).append(record)
        _digest_of[record.gop, record.index] = key
        _order.append((key, size, record))
        _bytes += size
        while _order and (len(_order) > MAX_FRAMES or _bytes > MAX_BYTES):
            old, n, rec = _order.popleft()
            _bytes -= n
            if _digest_of.get((rec.gop, rec.index)) == old:
                del _digest_of[rec.gop, rec.index]
            kept = _records.get(old)
            if kept:
                kept.popleft()
                if not kept:
                    del _records[old]


def registered_frames() -> int:
    """How many frames hold a record now (0: the codec encodes every chunk itself, without hashing)."""
    return len(_order)


def claim(chunk: np.ndarray) -> list[tuple[str, bytes, int, int, tuple[bytes, ...]]] | None:
    """The segments that store ``chunk`` — uint8 ``(G, H, W, 3)`` — from registered packets, or None
    when a frame has no record (the caller encodes the chunk itself).

    Each segment is ``(codec, extradata, skip, take, packets)`` as
    :class:`replaybuf_zarr.codecs.video_chunk.Segment` takes it: consecutive frames of one GOP share a
    segment holding its packets from the keyframe to the last of them.  All-zero frames at the end of
    the chunk with no record (zarr's padding past the array's end) become one :data:`BLANK` segment."""
    if not _order:
        return None
    frames = list(chunk)
    digests = [_digest(f) for f in frames]
    with _lock:
        found: list[PacketRecord] = []
        for j, key in enumerate(digests):
            kept = _records.get(key)
            if not kept:
                break
            found.append(_cheapest(key, kept, found[-1] if found else None, digests[j + 1:]))
    tail = frames[len(found):]
    if tail and any(f.any() for f in tail):
        return None
    segments: list[tuple[str, bytes, int, int, tuple[bytes, ...]]] = []
    run: list[PacketRecord] = []
    for rec in found + [None]:  # type: ignore[list-item]
        if run and (rec is None or rec.gop is not run[0].gop or rec.index != run[-1].index + 1):
            gop = run[0].gop
            segments.append((gop.codec, gop.extradata, run[0].index, len(run),
                             tuple(gop.packets[:run[-1].index + 1])))
            run = []
        if rec is not None:
            run.append(rec)
    if tail:
        segments.append((BLANK, b"", 0, len(tail), ()))
    return segments


def _next_in_gop(key: bytes, previous: PacketRecord) -> PacketRecord | None:
    """The record of the frame after ``previous`` in its GOP when that frame's pixels have digest
    ``key`` (caller holds the lock)."""
    if _digest_of.get((previous.gop, previous.index + 1)) == key:
        return PacketRecord(previous.gop, previous.index + 1)
    return None


def _cheapest(key: bytes, kept: deque[PacketRecord], previous: PacketRecord | None,
              following: list[bytes]) -> PacketRecord:
    """Of the records whose frames decode to the same pixels (a still scene repeats frames: AV1's
    one-byte "show the last frame again" packets; ``kept``, digest ``key``), the one that stores
    cheapest: the next frame of
    ``previous``'s GOP (the run goes on: no packet stored twice); else the one whose GOP goes on
    longest with the ``following`` frames' digests, nearest its keyframe among equals (the fewest
    packets a new segment repeats).  Caller holds the lock."""
    if previous is not None:
        nxt = _next_in_gop(key, previous)
        if nxt is not None:
            return nxt

    def run(rec: PacketRecord) -> int:
        n = 0
        for after in following:
            rec = _next_in_gop(after, rec)
            if rec is None:
                break
            n += 1
        return n

    return max(reversed(kept), key=lambda rec: (run(rec), -rec.index))


def clear() -> None:
    """Drop every record."""
    global _bytes
    with _lock:
        _records.clear()
        _digest_of.clear()
        _order.clear()
        _bytes = 0


def _after_fork_in_child() -> None:
    """A forked child starts with no records and a fresh lock (another thread may have held it)."""
    global _lock, _bytes
    _lock = threading.Lock()
    _records.clear()
    _digest_of.clear()
    _order.clear()
    _bytes = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


#: open imports; the records are dropped when the last one ends
_sessions = ImportSessions(clear)
session = _sessions.session
