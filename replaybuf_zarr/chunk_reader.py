"""A fast synchronous chunk reader for zarr arrays on a ``LocalStore`` or ``MemoryStore``.

zarr-python's per-call machinery (~0.5 ms a call here) dwarfs decoding a chunk (~10–40 µs).  This
reader resolves an array's layout once — chunk keys, shard index size and location, the codec chain —
then serves row ranges by fetching chunk bytes synchronously (``os.pread`` on files, the dict of a
``MemoryStore``), decoding them with the array's own codecs (numcodecs Blosc/Zstd/GZip, the WebP
serializer's frame decoder, little/big-endian bytes), and keeping decoded chunks in a byte-bounded LRU
(:class:`~replaybuf_zarr.chunk_cache.ChunkCache`).

Layouts it does not know (filters, transposes, variable-length strings, other stores, irregular
grids, exotic shard index codecs) make :func:`make_reader` return ``None``: the caller falls back to
zarr-python.  A property test compares it with zarr-python over random layouts.

Sources: the Zarr v3 core spec (chunk key encodings, regular grid) and the sharding codec spec
(index of ``(offset, nbytes)`` uint64 pairs per inner chunk, ``2**64-1`` for an empty chunk, followed
by a crc32c when ``index_codecs`` are ``[bytes, crc32c]``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import zarr

from replaybuf_core.errors import CorruptStoreError

from .chunk_cache import ChunkCache
from .fetcher import Fetcher
from .layout import ChunkKeys, ShardLayout, chunk_layout
from .object_reads import Replaced
from .pool import PARALLEL_MIN, parallel_map
from .row_gather import ROW_COPY_BYTES, RowGather
from .spec_codecs import array_decoder, array_resized_decoder, array_row_decoder, crc32c

_EMPTY = 2**64 - 1  # offset and nbytes of a chunk a shard does not hold
#: on object stores, inner chunks of one shard closer than this (bytes) are fetched by one range request
COALESCE_GAP = 1 << 20


class ChunkReader(RowGather):
    """Reads row ranges of one zarr array through its chunks; build it with :func:`make_reader`.

    ``read(start, stop)`` returns exactly what ``array[start:stop]`` returns in zarr-python (dtype,
    shape, fill values for missing chunks).  Decoded chunks go through ``cache`` (shared LRU).
    """

    def __init__(self, arr: zarr.Array, fetcher: Fetcher, cache: ChunkCache, cache_id: Any,
                 chunk_shape: tuple[int, ...], decode: Callable, shard: ShardLayout | None,
                 keys: ChunkKeys, decode_rows: Callable | None = None, decode_resized: Callable | None = None):
        self.shape = tuple(arr.shape)
        self.dtype = arr.dtype if isinstance(arr.dtype, np.dtype) else np.dtype(arr.dtype)
        self.fill_value = arr.fill_value if arr.fill_value is not None else 0
        self.chunk_shape = chunk_shape
        self._key_of = keys
        self._prefix = f"{arr.path}/" if arr.path else ""
        self._fetch = fetcher
        self._cache = cache
        self._cache_id = cache_id
        self._decode = decode
        #: ``(bytes, rows) -> frames`` for codecs that decode some rows of a chunk for less than all
        #: (video: a GOP up to the last frame wanted); None: whole chunks only
        self._decode_rows = decode_rows
        #: ``(bytes, rows, FrameResize) -> frames`` of frame codecs (each decodes smaller its own way)
        self._decode_resized = decode_resized
        self._shard = shard
        self._index_cache: dict[tuple[int, ...], list | None] = {}
        self._keys: dict[tuple[int, ...], str] = {}
        self._strides = shard.strides if shard is not None else ()
        self._time_sharded = shard is not None and all(p == 1 for p in shard.per_shard[1:])
        self._inner_grid = tuple(-(-s // c) for s, c in zip(self.shape[1:], chunk_shape[1:]))
        self._inner_coords = list(np.ndindex(*self._inner_grid)) if self._inner_grid else [()]
        #: one chunk spans whole rows (every frame codec's layout): a row range is copied chunk by chunk
        self._whole_rows = tuple(chunk_shape[1:]) == tuple(self.shape[1:])
        #: chunks a batch read must touch to decode them on the pool: camera-sized frames of a frame
        #: codec cost a millisecond or more each (640x480: JPEG ~0.8 ms, a GOP of video several), so
        #: two already pay for the hand-off; small chunks need more to be worth it
        frame_bytes = int(np.prod(chunk_shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self._parallel_min = 2 if decode_resized is not None and frame_bytes >= ROW_COPY_BYTES else PARALLEL_MIN
        self._pinned: np.ndarray | None = None
        self._generation = 0  # bumped by forget(): decoded chunks fetched before are not cached
        self._lock = threading.Lock()  # forget() against _keep()/_shard_index() in reader threads

    # -- chunk access ---------------------------------------------------------------------------
    def _fill_chunk(self) -> np.ndarray:
        return np.full(self.chunk_shape, self.fill_value, dtype=self.dtype)

    def _key(self, coords: tuple[int, ...]) -> str:
        key = self._keys.get(coords)
        if key is None:
            key = self._keys[coords] = self._key_of(coords)
        return key

    def _shard_index(self, shard_coords: tuple[int, ...]) -> tuple[Any, list] | None:
        """``(handle, index)`` of the shard: the index as a flat list of ``[offset, nbytes]`` (C order
        of the inner chunks), read once per shard, and the handle it was read through (chunk bytes
        are read through it too, so index and bytes come from one version of the shard); None when
        the shard does not exist."""
        entry = self._index_cache.get(shard_coords, False)
        if entry is not False and not (entry is not None and getattr(entry[0], "retired", False)):
            return entry  # (a retired file's index is read again, through a new descriptor)
        sh = self._shard
        n = sh.index_size
        generation = self._generation
        handle = self._fetch.handle(self._key(shard_coords))
        entry = None
        if handle is not None:
            try:
                raw = self._fetch.read_tail(handle, n) if sh.at_end else self._fetch.read_at(handle, 0, n)
                entry = (handle, self._check_index(shard_coords, raw, self._fetch.size(handle)))
            finally:
                self._fetch.done(handle)
        with self._lock:
            if self._generation == generation:  # not replaced meanwhile by a write in another thread
                self._index_cache[shard_coords] = entry
        return entry

    def _check_index(self, shard_coords: tuple[int, ...], raw: bytes, size: int) -> list:
        """The shard index as a list of ``[offset, nbytes]``, after checking it (Zarr v3 sharding
        spec): long enough, its crc32c when the index codecs carry one, every chunk inside the file.

        Raises:
            CorruptStoreError: naming the array and the shard (a truncated or damaged shard).
        """
        sh = self._shard
        where = f"{self._prefix.rstrip('/') or 'array'}: shard {shard_coords}"
        if len(raw) < sh.index_size:
            raise CorruptStoreError(f"{where} is {size} bytes, too short for its {sh.index_size}-byte index "
                                    "(truncated or emptied)")
        body = raw[:-4] if sh.crc else raw
        if sh.crc:
            if crc32c(body) != int.from_bytes(raw[-4:], "little"):
                raise CorruptStoreError(f"{where}: the index checksum (crc32c) does not match (damaged shard)")
        index = np.frombuffer(body, dtype="<u8").reshape(-1, 2)
        used = index[:, 0] != _EMPTY
        if np.any(index[used, 0] + index[used, 1] > size):
            raise CorruptStoreError(f"{where}: the index points past the end of the {size}-byte shard (truncated)")
        return index.tolist()

    def _locate(self, coords: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """``(shard coordinates, index of the inner chunk in the shard)`` of chunk ``coords``."""
        per = self._shard.per_shard
        if self._time_sharded:  # shards split time only (camera frames): the common, fast case
            t, p = coords[0], per[0]
            return (t // p,) + coords[1:], t % p
        local = 0
        for c, p, stride in zip(coords, per, self._strides):
            local += (c % p) * stride
        return tuple(c // p for c, p in zip(coords, per)), local

    def _raw_chunk(self, coords: tuple[int, ...]) -> bytes | None:
        if self._shard is None:
            return self._fetch.get(self._key(coords))
        shard_coords, local = self._locate(coords)
        for _ in range(8):  # a file retired between its index and its bytes is read again
            entry = self._index_cache.get(shard_coords, False)
            if entry is False or (entry is not None and getattr(entry[0], "retired", False)):
                entry = self._shard_index(shard_coords)
            if entry is None:
                return None
            handle, idx = entry
            offset, nbytes = idx[local]
            if offset == _EMPTY:
                return None
            if not self._fetch.reuse(handle):
                with self._lock:
                    if self._index_cache.get(shard_coords) is entry:
                        del self._index_cache[shard_coords]
                continue
            try:
                return self._fetch.read_at(handle, offset, offset + nbytes)
            except Replaced:  # an object store's shard replaced since its index was read: again
                with self._lock:
                    if self._index_cache.get(shard_coords) is entry:
                        del self._index_cache[shard_coords]
                continue
            finally:
                self._fetch.done(handle)
        raise RuntimeError(f"{self._prefix.rstrip('/') or 'array'}: shard {shard_coords} keeps being replaced "
                           "while it is read")

    def chunk(self, coords: tuple[int, ...]) -> np.ndarray:
        """The decoded chunk at grid ``coords`` (fill values when it was never written)."""
        ckey = (self._cache_id, coords)
        hit = self._cache.get(ckey)
        if hit is not None:
            return hit
        generation = self._generation
        out = self._decode_or_fill(self._raw_chunk(coords), coords)
        out.flags.writeable = False
        self._keep(generation, [coords], [out])
        return out

    def _keep(self, generation: int, coords: Sequence[tuple[int, ...]], decoded: Sequence[np.ndarray]) -> None:
        """Cache decoded chunks — unless a :meth:`forget` ran since they were fetched: a write in
        another thread may have replaced the object meanwhile, and the old bytes must not stay."""
        with self._lock:  # a forget() either sees these entries (and drops them) or they are not put
            if self._generation != generation:
                return
            for c, d in zip(coords, decoded):
                self._cache.put((self._cache_id, c), d)

    def forget(self, start: int, stop: int) -> None:
        """Drop everything held for rows ``[start, stop)`` after their stored objects were rewritten:
        decoded chunks in the cache, shard indexes, open descriptors of the objects; and a pinned
        copy of the array."""
        self._pinned = None
        if stop <= start:
            with self._lock:
                self._generation += 1
            return
        c0 = self.chunk_shape[0]
        per = self._shard.per_shard if self._shard is not None else None
        chunks = [(t,) + inner for t in range(start // c0, (stop - 1) // c0 + 1) for inner in self._inner_coords]
        objects = {c if per is None else tuple(x // p for x, p in zip(c, per)) for c in chunks}
        for coords in objects:  # first the descriptors: a fetch from now on opens the new file ...
            self._fetch.forget(self._key(coords))
        with self._lock:  # ... then what was decoded: atomic with _keep's check-and-put
            self._generation += 1
            for c in chunks:
                self._cache.discard((self._cache_id, c))
            if per is not None:
                for coords in objects:
                    self._index_cache.pop(coords, None)

    def grow(self, n_rows: int) -> None:
        """The array grew to ``n_rows`` rows (nothing stored changed: the new rows hold the fill value)."""
        self.shape = (int(n_rows),) + self.shape[1:]

    # -- row reads ------------------------------------------------------------------------------
    def pin(self) -> None:
        """Load the whole array into memory; later reads never touch the store."""
        self._pinned = None
        pinned = self.read(0, self.shape[0])
        pinned.flags.writeable = False
        self._pinned = pinned

    @property
    def pinned(self) -> np.ndarray | None:
        """The read-only in-memory copy :meth:`pin` made, None when not pinned (or forgotten since)."""
        return self._pinned

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` (``0 <= start <= stop <= shape[0]``) as a new ndarray."""
        if self._pinned is not None:
            return self._pinned[start:stop].copy()
        c0 = self.chunk_shape[0]
        if (self._cache.max_bytes == 0 and start % c0 == 0 and stop - start == c0
                and len(self._inner_coords) == 1 and self.chunk_shape[1:] == self.shape[1:]):
            chunk = self.chunk((start // c0,) + (0,) * (len(self.shape) - 1))  # a whole chunk, not cached:
            if chunk.flags.owndata:  # decoded into its own array: hand it out as it is
                chunk.flags.writeable = True
                return chunk
            return chunk.copy()
        out = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
        if stop > start:
            coords = [(t,) + inner for t in range(start // c0, (stop - 1) // c0 + 1) for inner in self._inner_coords]
            if len(coords) >= PARALLEL_MIN:
                self._read_into(out, start, stop, self.chunks(coords))  # decoded in parallel
                return out
        self._read_into(out, start, stop)
        return out

    def _read_into(self, out: np.ndarray, start: int, stop: int, got: dict | None = None) -> None:
        if stop <= start:
            return
        c0 = self.chunk_shape[0]
        if self._whole_rows:  # the per-item path (rb[key][a:b] of camera frames): no per-axis slices
            inner = self._inner_coords[0]
            for t in range(start // c0, (stop - 1) // c0 + 1):
                lo, hi = max(start, t * c0), min(stop, (t + 1) * c0)
                ch = got[(t,) + inner] if got is not None else self.chunk((t,) + inner)
                out[lo - start:hi - start] = ch[lo - t * c0:hi - t * c0]
            return
        for t in range(start // c0, (stop - 1) // c0 + 1):
            lo, hi = max(start, t * c0), min(stop, (t + 1) * c0)
            for inner in self._inner_coords:
                ch = got[(t,) + inner] if got is not None else self.chunk((t,) + inner)
                dst = [slice(lo - start, hi - start)]
                src = [slice(lo - t * c0, hi - t * c0)]
                for ax, i in enumerate(inner, start=1):
                    c = self.chunk_shape[ax]
                    e = min(self.shape[ax], (i + 1) * c)
                    dst.append(slice(i * c, e))
                    src.append(slice(0, e - i * c))
                out[tuple(dst)] = ch[tuple(src)]

    def _decode_or_fill(self, raw: bytes | None, coords: tuple[int, ...] = ()) -> np.ndarray:
        if raw is None:
            return self._fill_chunk()
        try:
            return self._decode(raw)
        except Exception as exc:
            raise self._undecodable(coords, exc) from exc

    def _undecodable(self, coords: tuple[int, ...], exc: Exception) -> CorruptStoreError:
        """The error for chunk ``coords`` whose bytes do not decode: naming the array, the chunk and its rows."""
        c0 = self.chunk_shape[0]
        where = f"chunk {coords} (rows {coords[0] * c0}..{(coords[0] + 1) * c0 - 1})" if coords else "a chunk"
        return CorruptStoreError(f"{self._prefix.rstrip('/') or 'array'}: {where} does not decode: {exc}")

    def _fetch_and_decode(self, coords: tuple[int, ...]) -> np.ndarray:
        return self._decode_or_fill(self._raw_chunk(coords), coords)

    def chunks(self, coords: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
        """Decoded chunks for many grid coordinates: cache hits first, the rest fetched in order and
        decoded on a thread pool when there are many."""
        out: dict[tuple[int, ...], np.ndarray] = {}
        missing = []
        for c in coords:
            hit = self._cache.get((self._cache_id, c))
            if hit is None:
                missing.append(c)
            else:
                out[c] = hit
        if missing:  # fetched (pread releases the GIL) and decoded by the same task
            generation = self._generation
            if self._fetch.kind == "object" and self._shard is not None:
                raws = self._object_shard_reads(missing)  # a few coalesced requests per shard
                decoded = parallel_map(self._decode_or_fill, [raws[c] for c in missing], missing)
            else:
                decoded = parallel_map(self._fetch_and_decode, missing)
            for c, d in zip(missing, decoded):
                d.flags.writeable = False  # cached and handed out as views
                out[c] = d
            self._keep(generation, missing, decoded)
        return out

    def _object_shard_reads(self, coords: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], bytes | None]:
        """Raw bytes of sharded chunks on an object store, by shard: the shard indexes (cached) read
        in parallel, then per shard the needed inner chunks in coalesced spans (gaps up to
        ``COALESCE_GAP``), one range request per span, several shards in flight on the codec pool.
        A shard replaced meanwhile (its ETag changed) is read again from its new index."""
        by_shard: dict[tuple[int, ...], list] = {}
        for c in coords:
            shard_coords, local = self._locate(c)
            by_shard.setdefault(shard_coords, []).append((local, c))
        shards = list(by_shard)
        for _ in range(8):
            parallel_map(self._shard_index_cached, shards)
            results = parallel_map(lambda sc: self._read_shard_chunks(sc, by_shard[sc]), shards)
            if all(r is not None for r in results):
                out: dict = {}
                for r in results:
                    out.update(r)
                return out
            shards = [sc for sc, r in zip(shards, results) if r is None]  # replaced: read again
            for sc in shards:
                with self._lock:
                    self._index_cache.pop(sc, None)
        raise RuntimeError(f"{self._prefix.rstrip('/') or 'array'}: shards {shards} keep being replaced while read")

    def _shard_index_cached(self, shard_coords: tuple[int, ...]):
        entry = self._index_cache.get(shard_coords, False)
        if entry is False or (entry is not None and getattr(entry[0], "retired", False)):
            entry = self._shard_index(shard_coords)
        return entry

    def _read_shard_chunks(self, shard_coords, wanted: list) -> dict | None:
        """``{coords: bytes or None}`` of the ``(local, coords)`` in ``wanted`` of one shard; None when
        the shard was replaced since its index was read."""
        entry = self._shard_index_cached(shard_coords)
        if entry is None:
            return {c: None for _, c in wanted}
        handle, idx = entry
        out: dict = {}
        spans: list[list] = []  # [start, stop, [(coords, offset, nbytes), ...]]
        for local, c in sorted(wanted, key=lambda w: idx[w[0]][0]):
            offset, nbytes = idx[local]
            if offset == _EMPTY:
                out[c] = None
                continue
            if spans and offset - spans[-1][1] <= COALESCE_GAP:
                spans[-1][1] = max(spans[-1][1], offset + nbytes)
                spans[-1][2].append((c, offset, nbytes))
            else:
                spans.append([offset, offset + nbytes, [(c, offset, nbytes)]])
        for start, stop, members in spans:
            try:
                raw = self._fetch.read_at(handle, start, stop)
            except Replaced:
                return None
            for c, offset, nbytes in members:
                out[c] = raw[offset - start: offset - start + nbytes]
        return out

    def read_ranges(self, starts: Sequence[int], stops: Sequence[int]) -> list[np.ndarray]:
        """Many row ranges at once: every chunk touched is fetched and decoded once (in parallel
        when many), then each range is cut out of the decoded chunks.  A range inside one chunk is
        returned as a read-only view of the cached chunk (no copy); copy before writing to it."""
        if self._pinned is not None:
            return [self._pinned[a:b] for a, b in zip(starts, stops)]
        starts = [int(a) for a in starts]
        stops = [int(b) for b in stops]
        c0 = self.chunk_shape[0]
        times = sorted({t for a, b in zip(starts, stops) if b > a for t in range(a // c0, (b - 1) // c0 + 1)})
        got = self.chunks([(t,) + inner for t in times for inner in self._inner_coords])
        simple = self._inner_coords == [()] or all(g == 1 for g in self._inner_grid)
        out = []
        for a, b in zip(starts, stops):
            if b > a and simple and a // c0 == (b - 1) // c0:  # within one chunk: a read-only view
                t = a // c0
                ch = got[(t,) + self._inner_coords[0]]
                if len(self.shape) > 1 and ch.shape[1:] != self.shape[1:]:
                    ch = ch[(slice(None),) + tuple(slice(0, s) for s in self.shape[1:])]
                out.append(ch[a - t * c0: b - t * c0])
                continue
            arr = np.empty((b - a,) + self.shape[1:], dtype=self.dtype)
            if b > a and simple:
                inner = self._inner_coords[0]
                for t in range(a // c0, (b - 1) // c0 + 1):
                    lo, hi = max(a, t * c0), min(b, (t + 1) * c0)
                    ch = got[(t,) + inner]
                    if len(self.shape) > 1 and ch.shape[1:] != self.shape[1:]:
                        ch = ch[(slice(None),) + tuple(slice(0, s) for s in self.shape[1:])]
                    arr[lo - a: hi - a] = ch[lo - t * c0: hi - t * c0]
            elif b > a:
                self._read_into(arr, a, b)
            out.append(arr)
        return out


def make_reader(arr: zarr.Array, cache: ChunkCache, cache_id: Any) -> ChunkReader | None:
    """A :class:`ChunkReader` for ``arr``, or None when its layout, codecs or store are not supported
    (the layout is read from the array's ``zarr.json`` / ``.zarray``: :func:`~.layout.chunk_layout`)."""
    try:
        fetcher = Fetcher(arr.store)
    except TypeError:
        return None
    dtype = arr.dtype if isinstance(arr.dtype, np.dtype) else None
    if dtype is None or dtype.kind not in "biufc" or arr.ndim == 0:
        return None
    layout = chunk_layout(arr)
    if layout is None or layout.dtype != dtype.newbyteorder("="):
        return None
    decode = array_decoder(layout.codecs, layout.chunk_shape, dtype)
    if decode is None:
        return None
    return ChunkReader(arr, fetcher, cache, cache_id, layout.chunk_shape, decode, layout.shard, layout.keys,
                       array_row_decoder(layout.codecs, layout.chunk_shape, dtype),
                       array_resized_decoder(layout.codecs, layout.chunk_shape, dtype))
