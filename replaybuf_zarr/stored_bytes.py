"""The zarr backend's verbs that move stored objects as they are: a byte-for-byte copy of an array
(:mod:`.object_copy`) and rows of camera frames moved without decoding a frame (:mod:`.row_splice`).
A mixin of :class:`~replaybuf_zarr.backend.ZarrBackend` (its ``get_array``, ``_settle``,
``_check_writable``, ``_readers``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replaybuf_core.interrupts import deferred_sigint

#: each verb runs whole before a Ctrl-C is acted on (see :mod:`.backend`)
_whole = deferred_sigint()


class StoredBytes:
    """``copy_stored``, ``can_splice``, ``splice_rows`` and appends after a partial GOP of
    :class:`~replaybuf_zarr.backend.ZarrBackend`."""

    @_whole
    def copy_stored(self, src: Any, src_group: str, src_name: str, group: str, name: str, n_rows: int) -> bool:
        """Optional protocol verb: fill the new, empty array ``group/name`` with the stored objects of
        ``src``'s ``src_group/src_name`` (another zarr backend) holding its first ``n_rows`` rows, byte
        for byte, when both arrays have the same codecs, chunks and shards (:mod:`.object_copy`).
        False, nothing written, when that does not hold: the caller copies rows."""
        if not isinstance(src, StoredBytes):
            return False
        self._check_writable()
        src._settle((src_group, src_name))
        from .object_copy import copy_objects

        done = copy_objects(src.get_array(src_group, src_name), self.get_array(group, name), n_rows)
        if done:
            self._readers.pop((group, name), None)
        return done

    def can_splice(self, group: str, name: str) -> bool:
        """Optional protocol verb: True when rows of ``group/name`` can be moved by :meth:`splice_rows`
        as stored bytes (camera frames of a frame codec, chunks spanning whole frames, a local or
        in-memory store: :func:`~replaybuf_zarr.row_splice.spliceable`)."""
        from .row_splice import spliceable

        return spliceable(self.get_array(group, name)) is not None

    @_whole
    def splice_rows(self, group: str, name: str, start: int, pieces: Sequence[tuple[str, int, int]],
                    src_group: str | None = None) -> bool:
        """Optional protocol verb: rows ``[start, start + n)`` of ``group/name`` become the rows
        ``pieces`` name (``(array, a, b)``: rows ``[a, b)`` of another array of ``src_group``, default
        ``group``, with the same chunks and codecs), moved as stored bytes — no frame decoded or encoded — and the array
        ends there (:func:`~replaybuf_zarr.row_splice.splice_rows`: ``start`` on the chunk grid).
        False when that cannot be done: the caller writes the rows itself."""
        self._check_writable()
        from .row_splice import splice_rows

        self._settle((group, name))
        return splice_rows(self, group, name, start, pieces, src_group or group)

    def _append_to_partial_gop(self, key: tuple[str, str], start: int, values: Any) -> int:
        """Rows of ``values`` written into a video chunk that holds rows before ``start`` (an append
        after a partial GOP), its stored frames kept as they are (:func:`~.row_splice.write_into_partial_chunk`);
        0 when that does not apply."""
        if key[0] != "data" or not values.ndim or str(values.dtype) != "uint8" or values.ndim != 4:
            return 0
        from .row_splice import write_into_partial_chunk

        return write_into_partial_chunk(self, key[0], key[1], start, values)
