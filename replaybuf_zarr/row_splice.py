"""Moving rows of camera frames between arrays as stored bytes: no frame decoded or encoded.

An edit that deletes, keeps or trims episodes moves the rows after its first change down.  For a
frame key whose codec is lossy (JPEG, WebP, video, a pass-through import's packets) decoding and
encoding them again would be a second lossy generation of every moved frame.  Here rows move as
the codec stored them:

* a one-frame codec (JPEG, WebP, JPEG XL: a chunk is one frame) moves whole chunk bytes;
* the video codec (a chunk of G frames made of segments, each a run of packets from a keyframe:
  :mod:`replaybuf_zarr.codecs.video_chunk`) re-cuts segments: a new chunk holds the packets of the
  GOPs its frames come from, each with the frames it keeps (``skip`` / ``take``), so a shift that
  is not a multiple of G costs bytes (up to the GOPs each new chunk touches) and decode time (a
  reader decodes a segment's skipped frames), never pixels.

The frame codec says how (:meth:`~replaybuf_zarr.codecs.frame_codec.FrameCodec.splice_chunk`).
Chunks are read through the fast reader's raw path (shards too) and written whole, a shard at a
time, by the fast writer (temporary file, rename): ``LocalStore`` and ``MemoryStore`` arrays of
zarr v3 whose chunks span whole frames.  Anything else, and a video codec whose chunk bytes are
compressed after it, is not spliceable: :func:`spliceable` says None and the caller decodes and
encodes.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from .chunk_writer import make_writer
from .layout import chunk_layout
from .pool import codec_pool
from .spec_codecs import frame_codec

__all__ = ["cut_partial_chunk", "spliceable", "splice_rows", "write_into_partial_chunk"]


def spliceable(arr: Any) -> Any:
    """The frame codec of ``arr`` (a zarr array) when its rows can be moved as stored bytes (see the
    module docstring), else None."""
    layout = chunk_layout(arr)
    if layout is None or layout.zarr_format != 3 or tuple(layout.chunk_shape[1:]) != tuple(arr.shape[1:]):
        return None
    codec = frame_codec(layout.codecs[0])
    if codec is None or (codec.frames_per_chunk > 1 and len(layout.codecs) > 1):
        return None
    if make_writer(arr) is None:
        return None
    return codec


def _same_chunks(a: Any, b: Any) -> bool:
    la, lb = chunk_layout(a), chunk_layout(b)
    return (la is not None and lb is not None and la.codecs == lb.codecs and la.chunk_shape == lb.chunk_shape
            and la.dtype == lb.dtype and a.fill_value == b.fill_value)


def splice_rows(backend: Any, group: str, name: str, start: int, pieces: Sequence[tuple[str, int, int]],
                src_group: str | None = None) -> bool:
    """Make rows ``[start, start + n)`` of ``group/name`` (a zarr array of ``backend``, a
    :class:`~replaybuf_zarr.backend.ZarrBackend`) the rows ``pieces`` name — ``(array, a, b)``: rows
    ``[a, b)`` of another array of ``src_group`` (default ``group``) with the same chunks and
    codecs, in order, ``n`` rows in
    all — by moving stored bytes, and end the array there (it is grown or shrunk to ``start + n``
    rows).  ``start`` must be a multiple of the chunk length; rows before it in the same stored
    object keep their bytes.

    Returns True when done; False when the arrays are not spliceable (:func:`spliceable`, other
    chunks or codecs, ``start`` off the chunk grid, a source chunk never written, a chunk needing
    more segments than a video chunk holds): nothing was written then, or — for the last two, found
    on the way — some objects were: the caller writes every row of the range itself."""
    arr = backend.get_array(group, name)
    codec = spliceable(arr)
    layout = chunk_layout(arr)
    if codec is None or layout is None:
        return False
    G = int(layout.chunk_shape[0])
    start = int(start)
    if start % G or start > arr.shape[0]:
        return False
    src_group = src_group or group
    sources = {(src_group, src) for src, _, _ in pieces}
    if (group, name) in sources:
        return False
    readers = {}
    for g, src in sources | {(group, name)}:
        other = backend.get_array(g, src)
        if not _same_chunks(arr, other):
            return False
        backend._settle((g, src))
        readers[(g, src)] = backend._reader(g, src)
        if readers[(g, src)] is None:
            return False
    n = sum(int(b) - int(a) for _, a, b in pieces)
    stop = start + n
    L = int(layout.shard.shape[0]) if layout.shard is not None else G
    first = (start // L) * L
    runs = ([((group, name), first, start)] if first < start else []) + \
        [((src_group, s), int(a), int(b)) for s, a, b in pieces if b > a]
    writer = make_writer(arr)
    if writer is None:
        return False
    links = _linkable(arr, layout, {src: backend.get_array(*src) for src in sources})
    per_object = L // G
    raw: OrderedDict[tuple[Any, int], bytes | None] = OrderedDict()
    tail = (0,) * (len(layout.chunk_shape) - 1)

    def chunk_bytes(src: tuple[str, str], c: int) -> bytes | None:
        key = (src, c)
        if key not in raw:
            raw[key] = readers[src]._raw_chunk((c,) + tail)
            while len(raw) > 8:
                raw.popitem(last=False)
        return raw[key]

    block: list[bytes] = []
    block_first = first // G
    window: list[tuple[bytes, int, int]] = []
    filled = 0
    stores = _Stores(writer)

    def close_chunk() -> bool:
        nonlocal window, filled, block, block_first
        data = codec.splice_chunk(window, G)
        if data is None:
            return False
        block.append(data)
        window, filled = [], 0
        if len(block) == per_object:
            stores.put(block_first, block)
            block_first += len(block)
            block = []
        return True

    with stores:  # every store finished (or its error raised) before the array is resized
        for src, a, b in runs:
            r = a
            while r < b:
                if not filled and not block and not r % L and b - r >= L and src in links \
                        and writer.link_object(links[src], r // L, block_first // per_object):
                    block_first += per_object  # a whole stored object, aligned in both: linked, not copied
                    r += L
                    continue
                c = r // G
                hi = min(b, (c + 1) * G, r + (G - filled))
                data = chunk_bytes(src, c)
                if data is None:
                    return False
                window.append((data, r - c * G, hi - c * G))
                filled += hi - r
                r = hi
                if filled == G and not close_chunk():
                    return False
        if filled and not close_chunk():
            return False
        if block:
            stores.put(block_first, block)
    backend._invalidate(group, name)
    arr = backend.get_array(group, name)
    if arr.shape[0] != stop:
        arr.resize((stop,) + tuple(arr.shape[1:]))
        backend._invalidate(group, name)
    return True


class _Stores:
    """Stores of whole objects by ``writer`` on the codec pool, started in order while the caller
    splices the next ones (a write's system time overlaps the splicing), at most :attr:`AHEAD`
    in flight.  Leaving the ``with`` block waits for every one; the first store's error is raised
    then (unless the block raised its own)."""

    AHEAD = 4

    def __init__(self, writer: Any):
        self._writer = writer
        self._pending: deque[Future] = deque()

    def put(self, first: int, objects: list[bytes]) -> None:
        self._pending.append(codec_pool().submit(self._writer._store_objects, first, objects))
        while len(self._pending) > self.AHEAD:
            self._pending.popleft().result()

    def __enter__(self) -> "_Stores":
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        error = None
        while self._pending:
            try:
                self._pending.popleft().result()
            except BaseException as e:  # wait for the others before raising
                error = error or e
        if error is not None and kind is None:
            raise error


def _linkable(arr: Any, layout: Any, sources: dict) -> dict:
    """Source -> the :class:`~replaybuf_zarr.chunk_writer.ChunkWriter` of those ``sources`` (key ->
    zarr array) whose stored objects can be hard-linked into ``arr`` (its ``layout``): the same
    chunks, codecs and shards, both on local disk (:meth:`~replaybuf_zarr.chunk_writer.ChunkWriter.link_object`)."""
    out = {}
    for key, other in sources.items():
        lo = chunk_layout(other)
        if lo is None or lo.shard != layout.shard or not _same_chunks(arr, other):
            continue
        w = make_writer(other)
        if w is not None and w._local is not None:
            out[key] = w
    return out


class _VideoChunkAt:
    """The stored video chunk holding row ``row`` of ``group/name`` when ``row`` falls inside it
    (several frames a chunk, spliceable): ``codec``, ``G`` (frames a chunk), chunk index ``c`` and place
    ``r`` (> 0), ``first`` (the first row of its stored object), the raw chunks of that object
    from its start through chunk ``c`` (``before``, all written) and ``reader``.  ``ok`` False when
    any of that does not hold."""

    def __init__(self, backend: Any, group: str, name: str, row: int):
        self.ok = False
        self.arr = arr = backend.get_array(group, name)
        self.codec = spliceable(arr)
        layout = chunk_layout(arr)
        if self.codec is None or layout is None or self.codec.frames_per_chunk <= 1:
            return
        self.G = G = int(layout.chunk_shape[0])
        self.c, self.r = divmod(int(row), G)
        self.L = L = int(layout.shard.shape[0]) if layout.shard is not None else G
        self.first = (self.c * G // L) * L
        self.tail = (0,) * (len(layout.chunk_shape) - 1)
        if not self.r:
            return
        backend._settle((group, name))
        self.reader = backend._reader(group, name)
        if self.reader is None:
            return
        self.before = [self.reader._raw_chunk((j,) + self.tail) for j in range(self.first // G, self.c + 1)]
        self.ok = all(b is not None for b in self.before)

    def store(self, backend: Any, group: str, name: str, chunk: bytes, after: list[bytes], stop: int) -> bool:
        """Store the object with chunk ``c`` replaced by ``chunk`` (the chunks before it as stored,
        then ``after``); rows up to ``stop`` are forgotten by the reader.  False when there is no writer."""
        writer = make_writer(self.arr)
        if writer is None:
            return False
        writer._store_objects(self.first // self.G, self.before[:-1] + [chunk] + after)
        backend._forget((group, name), self.c * self.G, stop)
        return True


def write_into_partial_chunk(backend: Any, group: str, name: str, start: int, values: Any) -> int:
    """Write the first rows of ``values`` that fall in the chunk holding row ``start`` of ``group/name``
    — a video array (several frames a chunk) whose stored chunk already holds the rows before
    ``start``, none after it (an append) — without decoding or encoding the rows already there: the
    new rows are encoded as a segment of their own (padded to a GOP with their last frame, which the
    segment does not keep) and joined to the chunk's stored segments
    (:meth:`~replaybuf_zarr.codecs.video.VideoCodec.splice_chunk`).  Returns how many rows of
    ``values`` it wrote (the caller writes the rest, from the next chunk on); 0 when this does not
    apply (``start`` on the chunk grid, not a spliceable video array, the chunk never written, too
    many segments): nothing written then.  Rows of the chunk after those written are padding (black
    frames): the caller appends, it does not overwrite."""
    import numpy as np

    start = int(start)
    at = _VideoChunkAt(backend, group, name, start)
    n_rows = int(at.arr.shape[0])
    if not at.ok or not len(values) or start + len(values) < min((at.c + 1) * at.G, n_rows):
        return 0  # (rows after the write in its chunk would be lost: only appends and writes to the end)
    G, r = at.G, at.r
    # the chunks after it in its stored object keep their bytes (rows the caller writes next, or
    # padding): up to the first one never written
    after = []
    for j in range(at.c + 1, min(-(-n_rows // G), (at.first + at.L) // G)):
        raw = at.reader._raw_chunk((j,) + at.tail)
        if raw is None:
            break
        after.append(raw)
    k = min(len(values), G - r)
    new = np.asarray(values[:k])
    padded = np.concatenate([new, np.repeat(new[-1:], G - k, axis=0)]) if k < G else new
    data = at.codec.splice_chunk([(at.before[-1], 0, r), (at.codec.encode_frame(padded), 0, k)], G)
    if data is None or not at.store(backend, group, name, data, after, (at.c + 1) * G):
        return 0
    return k


def cut_partial_chunk(backend: Any, group: str, name: str, n_rows: int) -> bool:
    """Before a shrink of ``group/name`` to ``n_rows`` rows — a video array (several frames a chunk)
    whose chunk holding row ``n_rows`` also holds rows before it — make that chunk keep only those
    rows, as stored bytes (its segments re-cut: :meth:`~replaybuf_zarr.codecs.video.VideoCodec.splice_chunk`;
    no frame decoded or encoded), and drop the chunks after it in its stored object; its rows from
    ``n_rows`` on read as padding (black frames) should the array grow again.  Overwriting them with
    the fill value through zarr-python would decode and encode the whole chunk: a lossy generation of
    the frames before ``n_rows`` (committed frames, when recovery drops an interrupted append).

    Returns True when done (the caller then shrinks the shape); False, nothing written, when this
    does not apply: not a spliceable video array, ``n_rows`` on the chunk grid, a chunk never written,
    too many segments."""
    at = _VideoChunkAt(backend, group, name, n_rows)
    if not at.ok or int(n_rows) >= int(at.arr.shape[0]):
        return False
    data = at.codec.splice_chunk([(at.before[-1], 0, at.r)], at.G)
    return data is not None and at.store(backend, group, name, data, [],
                                         min(int(at.arr.shape[0]), at.first + at.L))
