"""Streaming array copy between any two backends, block by block along time."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from replaybuf_core.layout.chunks import row_bytes
from replaybuf_core.protocol import StorageBackend

_BLOCK_BYTES = 32 * 2**20


def block_rows(row_bytes: int, dst_object_len: int | None, src_chunk_len: int | None) -> int:
    """Rows per copy block: a multiple of the destination's stored-object length (so each
    destination chunk/shard is written once), at least one source chunk, about 32 MB at most
    beyond that."""
    unit = max(1, int(dst_object_len or 1))
    rows = max(unit, int(src_chunk_len or 1))
    rows = max(rows, min(_BLOCK_BYTES // max(row_bytes, 1), 1 << 20))
    return unit * math.ceil(rows / unit)


def copy_array(
    src: StorageBackend,
    src_group: str,
    src_name: str,
    dst: StorageBackend,
    dst_group: str,
    dst_name: str,
    *,
    n_rows: int | None = None,
    chunks: tuple[int, ...] | None = None,
    codec: Any = None,
    shards: tuple[int, ...] | None = None,
    fill_value: Any = None,
    client: Any = None,
    keep_stored: bool = False,
    progress: Callable[[int], Any] | None = None,
) -> bool:
    """Create ``dst_group/dst_name`` in ``dst`` and stream the first ``n_rows`` rows of the source
    into it; memory stays bounded by one block (see :func:`block_rows`).  With ``keep_stored`` (a
    lossy frame key: JPEG, video chunks, pass-through packets), no ``client``, and a destination
    backend that can (the optional verb ``copy_stored``: zarr to zarr with the same codecs, chunks
    and shards), the stored objects are copied byte for byte instead: no second lossy generation
    of every frame (the bytes are not decoded on the way: a damaged chunk stays as damaged).

    Returns True when the stored objects were copied as they are (``keep_stored``), False when rows
    were decoded and written.  0-d arrays (meta scalars) are copied whole.  With ``client`` (a ``distributed.Client``) the
    blocks are copied on its cluster, one task each (:mod:`replaybuf_core.cluster.copy`; both stores
    must be reachable by path or URL, the destination a zarr store: else ValueError before anything
    is created); the result is the same bit for bit.  ``progress(n_bytes)`` is called as rows are copied
    with their decoded bytes (:func:`~replaybuf_core.layout.chunks.row_bytes`).
    """
    shape = src.shape(src_group, src_name)
    dtype = src.dtype(src_group, src_name)
    if len(shape) == 0:
        dst.create_array(dst_group, dst_name, shape=(), dtype=dtype, chunks=None, codec=codec)
        dst.write(dst_group, dst_name, 0, np.asarray(src.get_array(src_group, src_name)[()]))
        return False
    n = shape[0] if n_rows is None else int(n_rows)
    if client is not None:  # refused before anything is created
        from replaybuf_core.cluster.copy import check_client, check_cluster_destination, endpoint_of

        check_client(client)
        endpoint_of(src)
        check_cluster_destination(endpoint_of(dst).backend, "a copy")
    dst.create_array(dst_group, dst_name, shape=(n,) + tuple(shape[1:]), dtype=dtype, chunks=chunks,
                     codec=codec, shards=shards, fill_value=fill_value)
    per_row = row_bytes(shape, dtype)
    done = progress or (lambda n_bytes: None)
    obj = (shards or chunks or (None,))[0]
    src_chunks = src.chunks(src_group, src_name) if hasattr(src, "chunks") else None
    step = block_rows(per_row, obj, src_chunks[0] if src_chunks else None)
    raw = getattr(dst, "copy_stored", None) if keep_stored and client is None else None
    if raw is not None and raw(src, src_group, src_name, dst_group, dst_name, n):
        done(n * per_row)
        return True
    if client is not None:
        from replaybuf_core.cluster.copy import copy_rows_on_cluster

        copy_rows_on_cluster(client, src, (src_group, src_name), dst, (dst_group, dst_name), n, step)
        done(n * per_row)
        return False
    for start in range(0, n, step):
        stop = min(n, start + step)
        dst.write(dst_group, dst_name, start, src.read(src_group, src_name, start, stop))
        done((stop - start) * per_row)
    return False
