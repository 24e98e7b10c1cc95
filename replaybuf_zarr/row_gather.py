"""Row gathers of the chunk reader: many rows of one array at once, straight into the caller's array.

The batch path of every sampler.  :meth:`RowGather.read_rows_async` decodes each chunk a batch
touches once (on the codec pool when many), then copies its rows into place; chunks of a codec that
decodes some rows for less than all (video: a GOP up to the last frame wanted) are decoded in part
and not cached; frame rows are copied one by one (a fancy-indexed gather would build a temporary of
them all, fresh pages every batch).  :meth:`RowGather.read_rows_resized` gathers camera frames made
smaller the codec's cheapest way.  A mixin of :class:`~replaybuf_zarr.chunk_reader.ChunkReader`,
which provides the chunk access it uses (``_raw_chunk``, ``chunks``, ``_keep``, the cache, the shape).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from replaybuf_core.protocol import Pending

from .pool import _CPUS, SharedMap, parallel_map

__all__ = ["RowGather", "RowsRead", "ROW_COPY_BYTES"]

#: rows of at least this many bytes (camera frames) are copied one by one into a gather's output: a
#: fancy-indexed gather would first build a temporary of them all (fresh pages every batch)
ROW_COPY_BYTES = 1 << 16


class RowGather:
    """Gathering rows of one array from its decoded chunks (see the module docstring)."""

    def _fetch_and_decode_rows(self, coords: tuple[int, ...], offsets: np.ndarray) -> np.ndarray:
        """Rows ``offsets`` (ascending places in the chunk) of chunk ``coords``, decoded alone."""
        raw = self._raw_chunk(coords)
        if raw is None:
            return np.full((len(offsets),) + self.chunk_shape[1:], self.fill_value, dtype=self.dtype)
        try:
            return self._decode_rows(raw, offsets.tolist())
        except Exception as exc:
            raise self._undecodable(coords, exc) from exc

    def _partial(self, rows: np.ndarray, missing: list) -> dict[tuple[int, ...], np.ndarray]:
        """``{coords: offsets}`` of the chunks among ``missing`` of which ``rows`` need only some rows,
        for a codec that decodes those alone (:attr:`_decode_rows`): decoded so, they are not cached."""
        if self._decode_rows is None or not missing or self._fetch.kind == "object":
            return {}  # (object stores: whole chunks, fetched by coalesced range requests)
        c0 = self.chunk_shape[0]
        wanted = np.unique(rows.reshape(-1))
        t = wanted // c0
        cut = np.flatnonzero(np.diff(t)) + 1
        by_chunk = {int(g[0] // c0): g - int(g[0] // c0) * c0 for g in np.split(wanted, cut)}
        out = {}
        for c in missing:
            offsets = by_chunk.get(c[0])
            if offsets is not None and len(offsets) < c0:
                out[c] = offsets
        return out

    def read_rows(self, rows: np.ndarray, out: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
        """Gather ``rows`` (int array of any shape, ``0 <= row < shape[0]``) into ``out`` (shape
        ``rows.shape + shape[1:]``, may be a strided view): every chunk touched is decoded once (in
        parallel when many) and its rows are copied straight into ``out`` — no intermediate arrays.
        ``at`` (int (n,), distinct; n = ``len(rows)``): row ``i`` of ``rows`` goes to ``out[at[i]]``
        instead, ``out`` of shape ``(m,) + rows.shape[1:] + shape[1:]``."""
        return self.read_rows_async(rows, out, at).result()

    def read_rows_async(self, rows: np.ndarray, out: np.ndarray, at: np.ndarray | None = None,
                        convert: Any = None) -> RowsRead:
        """Start :meth:`read_rows`: when many chunks must be decoded, pool helpers start decoding now
        and ``result()`` of the returned :class:`RowsRead` joins them (decoding what is left on the
        calling thread), fills ``out`` and returns it.  Leave ``out`` alone until then.

        ``convert`` (camera frames, uint8 ``(T, H, W, C)``): a
        :class:`~replaybuf_core.layout.frame_convert.FrameConversion`; ``out`` (C-contiguous) then
        has its converted step shape and dtype, and each frame is converted by the thread that
        decoded it, while it is in cache (the ``"rows_convert"`` capability)."""
        rows = np.asarray(rows, dtype=np.int64)
        simple = self._inner_coords == [()] or all(g == 1 for g in self._inner_grid)
        if convert is not None and (rows.size == 0 or self._pinned is not None or not simple or len(self.shape) != 4
                                    or not out.flags.c_contiguous):
            staged = self.read_rows_async(rows, np.empty(rows.shape + tuple(self.shape[1:]), self.dtype))
            return RowsRead(finish=lambda: convert.convert_rows(staged.result(), out, at))
        if rows.size == 0 or self._pinned is not None or not simple:
            return RowsRead(value=self._read_rows_other(rows, out, at))
        c0 = self.chunk_shape[0]
        inner = self._inner_coords[0]
        t = rows.reshape(-1) // c0
        uniq = np.unique(t)
        got: dict[tuple[int, ...], np.ndarray] = {}
        missing = []
        for u in uniq.tolist():
            c = (u,) + inner
            hit = self._cache.get((self._cache_id, c))
            if hit is None:
                missing.append(c)
            else:
                got[c] = hit
        partial = self._partial(rows, missing)
        if partial:
            missing = [c for c in missing if c not in partial]
        items = [(c, None) for c in missing] + list(partial.items())
        parts: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

        if len(items) < self._parallel_min or _CPUS < 2 or self._fetch.kind == "object":  # object stores: coalesced per shard
            got.update(self.chunks(missing))
            for c, offsets in partial.items():
                parts[c] = (offsets, self._fetch_and_decode_rows(c, offsets))
            return RowsRead(value=self._scatter(rows, t, uniq, got, out, parts, at, convert))
        plan = _Plan(self, rows, t, uniq, out, at, convert)

        def decode(item: tuple) -> np.ndarray:  # on a pool helper or the joining thread
            c, offsets = item
            d = self._fetch_and_decode(c) if offsets is None else self._fetch_and_decode_rows(c, offsets)
            plan.place(c[0], d, offsets)  # its rows copied into place at once, by the thread that decoded them
            return d

        generation = self._generation
        job = SharedMap(decode, items, _CPUS - 1, share=True)  # other joins may decode these while they wait

        def finish() -> np.ndarray:
            for c, hit in got.items():  # cached chunks, while the helpers decode
                plan.place(c[0], hit, None)
            decoded = job.join()
            for c, d in zip(missing, decoded):
                d.flags.writeable = False  # cached and handed out as views
            self._keep(generation, missing, decoded[:len(missing)])
            return out

        return RowsRead(finish=finish)

    def read_rows_resized(self, rows: np.ndarray, out: np.ndarray, fr: Any) -> np.ndarray:
        """Gather camera frames ``rows`` (int array of any shape) cropped and resized as ``fr`` (a
        :class:`~replaybuf_core.layout.frame_resize.FrameResize`) says into ``out`` (``rows.shape +
        (fr.height, fr.width[, C])``): every chunk touched decoded once, its frames made smaller the
        codec's cheapest way (:func:`~.spec_codecs.array_resized_decoder`; not cached)."""
        from replaybuf_core.layout.frame_resize import resize_frame

        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        if flat.size == 0:
            return out
        c0 = self.chunk_shape[0]
        wanted = np.unique(flat)
        if self._pinned is not None or self._decode_resized is None or not self._whole_rows:
            frames = {int(r): resize_frame(self.read(int(r), int(r) + 1)[0], fr) for r in wanted}
        else:
            groups = np.split(wanted, np.flatnonzero(np.diff(wanted // c0)) + 1)
            decoded = parallel_map(lambda g: self._fetch_resized(int(g[0] // c0), (g % c0).tolist(), fr), groups)
            frames = {int(r): d[k] for g, d in zip(groups, decoded) for k, r in enumerate(g)}
        for pos, r in zip(np.ndindex(rows.shape), flat.tolist()):
            out[pos] = frames[r]
        return out

    def _fetch_resized(self, t: int, offsets: list[int], fr: Any) -> np.ndarray:
        coords = (t,) + self._inner_coords[0]
        raw = self._raw_chunk(coords)
        if raw is None:
            return np.full((len(offsets), fr.height, fr.width) + self.shape[3:], self.fill_value, dtype=self.dtype)
        try:
            return self._decode_resized(raw, offsets, fr)
        except Exception as exc:
            raise self._undecodable(coords, exc) from exc

    def _read_rows_other(self, rows: np.ndarray, out: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
        """Empty, pinned, or chunks split along other axes (through ``read_ranges``)."""
        if rows.size == 0:
            return out
        if self._pinned is not None:
            out[slice(None) if at is None else at] = self._pinned[rows]
            return out
        if at is not None:
            out[at] = self._read_rows_other(rows, np.empty(rows.shape + out.shape[rows.ndim:], out.dtype))
            return out
        from replaybuf_core.protocol import read_rows_via_ranges

        return read_rows_via_ranges(_ReaderAsStore(self), "data", "", rows, out)

    def _scatter(self, rows: np.ndarray, t: np.ndarray, uniq: np.ndarray, got: dict, out: np.ndarray,
                 parts: dict | None = None, at: np.ndarray | None = None, convert: Any = None) -> np.ndarray:
        """Copy each row from its decoded chunk (``got``: chunk coordinates → chunk; ``parts``: chunk
        coordinates → (offsets, the rows at those places) for chunks decoded in part) into ``out``
        (row ``i`` of ``rows`` into ``out[at[i]]`` when ``at`` is given; converted by ``convert``)."""
        plan = _Plan(self, rows, t, uniq, out, at, convert)
        inner = self._inner_coords[0]
        for u in uniq.tolist():
            part = parts.get((u,) + inner) if parts else None
            if part is None:
                plan.place(u, got[(u,) + inner], None)
            else:
                plan.place(u, part[1], part[0])
        return out


class _Plan:
    """Where the rows of a gather go, chunk by chunk: :meth:`place` copies (or with ``convert``
    converts) one decoded chunk's rows into ``out`` (the chunks' rows land in disjoint places, so
    threads may place chunks at once)."""

    def __init__(self, reader: RowGather, rows: np.ndarray, t: np.ndarray, uniq: np.ndarray, out: np.ndarray,
                 at: np.ndarray | None, convert: Any = None):
        self._out = out
        self._convert = convert
        c0 = reader.chunk_shape[0]
        shape, chunk_shape = reader.shape, reader.chunk_shape
        self._cut = ((slice(None),) + tuple(slice(0, s) for s in shape[1:])
                     if len(shape) > 1 and chunk_shape[1:] != shape[1:] else None)
        flat_rows = rows.reshape(-1)
        index = np.unravel_index(np.arange(flat_rows.size), rows.shape)
        if at is not None:
            index = (np.asarray(at, dtype=np.int64)[index[0]],) + index[1:]
        if convert is not None:  # one place a frame in out seen as (frames, *converted frame)
            self._flat = out.reshape((-1,) + out.shape[out.ndim - 3:])
            index = (np.ravel_multi_index(index, out.shape[:out.ndim - 3]),)
        # large rows (camera frames): each copied straight into place, no gathered temporary
        self._per_row = c0 == 1 or (out[(0,) * rows.ndim].nbytes >= ROW_COPY_BYTES if out.size else False)
        order = np.argsort(t, kind="stable")
        bounds = np.searchsorted(t[order], uniq, side="right")
        self._rows: dict[int, tuple[tuple[np.ndarray, ...], np.ndarray]] = {}
        lo = 0
        for u, hi in zip(uniq.tolist(), bounds.tolist()):
            sel = order[lo:hi]
            self._rows[u] = (tuple(ix[sel] for ix in index), flat_rows[sel] - u * c0)
            lo = hi

    def place(self, u: int, src: np.ndarray, offsets: np.ndarray | None) -> None:
        """Copy the rows of chunk ``u`` (along axis 0) from ``src``: the whole decoded chunk
        (``offsets`` None) or its rows at ``offsets`` (ascending places in the chunk) alone."""
        index, local = self._rows[u]
        if self._cut is not None:
            src = src[self._cut]
        at = local if offsets is None else np.searchsorted(offsets, local)
        out = self._out
        if self._convert is not None:
            self._convert.take(np.ascontiguousarray(src), at, self._flat, index[0])
        elif self._per_row:
            for pos, a in zip(zip(*(ix.tolist() for ix in index)), at.tolist()):
                out[pos] = src[a]
        else:
            out[index] = src[at]


class RowsRead(Pending):
    """A row read in progress (:meth:`ChunkReader.read_rows_async`): ``result()`` completes it once
    and returns the filled array (later calls return it again, or raise the same error again:
    :class:`~replaybuf_core.protocol.Pending`).  ``value``: a read already done."""

    def __init__(self, finish: Callable[[], np.ndarray] | None = None, value: np.ndarray | None = None):
        super().__init__(finish if finish is not None else (lambda: value))


class _ReaderAsStore:
    """Adapts one reader to the ``read_ranges`` verb (for :func:`read_rows_via_ranges`)."""

    def __init__(self, reader: RowGather):
        self._r = reader

    def read_ranges(self, group, name, starts, stops):
        return self._r.read_ranges(starts, stops)
