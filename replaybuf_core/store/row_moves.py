"""Moving rows of frame keys as stored bytes during an edit: which keys can, and the moves.

A backend that can (``can_splice`` / ``splice_rows``, optional protocol verbs: the zarr backend's
frame codecs on local and in-memory stores, :mod:`replaybuf_zarr.row_splice`) moves a frame key's
rows without decoding or encoding a frame: a one-frame codec's chunks (JPEG, WebP, JPEG XL) whole,
a video chunk's packets re-cut at the new chunk boundaries.  An edit (:mod:`.editing`) uses it for
every such key — lossy or not — in its three steps: the backup of the old tail (same codec and
chunks as the key: its chunks copied as they are), the rewrite of the tail from the backup, and a
roll-back.  So deleting, keeping or trimming episodes of a JPEG, video or pass-through store
re-encodes no kept frame: every kept frame reads back bit for bit as before.  Such a key's backup
starts on its stored-object (shard) grid, so on local disk its whole objects are hard-linked, not
copied, and a restore, whose rows are the undo's unshifted, links them back
(:meth:`~replaybuf_zarr.chunk_writer.ChunkWriter.link_object`).
"""

from __future__ import annotations

import numpy as np

from replaybuf_core.protocol import CAP_SHARDS, StorageBackend

__all__ = ["backup_by_bytes", "moved_keys", "runs_of", "splice"]


def moved_keys(store: StorageBackend, keys: list[str]) -> list[str]:
    """The data keys of ``keys`` whose rows ``store`` moves as stored bytes (``can_splice``)."""
    can = getattr(store, "can_splice", None)
    if not callable(can) or not callable(getattr(store, "splice_rows", None)):
        return []
    return [k for k in keys if can("data", k)]


def runs_of(src: str, ranges: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """Row ranges ``[a, b)`` of array ``src``, in order, as ``(src, a, b)`` runs: empty ranges
    dropped, a range starting where the one before it ends joined to it."""
    out: list[tuple[str, int, int]] = []
    for a, b in ranges:
        a, b = int(a), int(b)
        if b <= a:
            continue
        if out and out[-1][2] == a:
            out[-1] = (src, out[-1][1], b)
        else:
            out.append((src, a, b))
    return out


def splice(store: StorageBackend, key: str, start: int, pieces: list[tuple[str, int, int]],
           src_group: str = "data") -> bool:
    """Rows ``[start, ...)`` of ``data/key`` become ``pieces`` (arrays of ``src_group``; the array ends
    after them), moved as stored bytes; False when the backend could not (the caller writes the rows)."""
    return bool(store.splice_rows("data", key, int(start), pieces, src_group=src_group))


def backup_by_bytes(store: StorageBackend, key: str, a: int, b: int, dst: str, group: str = "data") -> bool:
    """Create ``group/dst`` with ``data/key``'s codec, chunks and shards holding its rows ``[a, b)``
    (``a`` on the chunk grid), their chunks copied as stored.  False — ``dst`` deleted again — when
    the backend could not."""
    shape = tuple(store.shape("data", key))
    shards = store.shards("data", key) if CAP_SHARDS in store.capabilities else None
    store.create_array(group, dst, shape=(0,) + shape[1:], dtype=np.dtype(store.dtype("data", key)),
                       chunks=store.chunks("data", key), codec=store.codec("data", key), shards=shards)
    if b <= a or store.splice_rows(group, dst, 0, [(key, a, b)], src_group="data"):
        return True
    store.delete_array(group, dst)
    return False
