"""The storage layout of a zarr v3 array, as the fast chunk reader and writer need it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr


@dataclass(frozen=True)
class ShardLayout:
    """Sharding of an array (Zarr v3 sharding codec): shard shape, inner chunks per shard, and where
    and how the index of ``(offset, nbytes)`` uint64 pairs is stored."""

    shape: tuple[int, ...]
    per_shard: tuple[int, ...]
    index_size: int  # bytes, crc32c included
    crc: bool
    at_end: bool

    @property
    def strides(self) -> tuple[int, ...]:
        """C-order strides (in entries) of the index over the inner chunk grid of one shard."""
        return tuple(int(np.prod(self.per_shard[i + 1:], dtype=np.int64)) for i in range(len(self.per_shard)))


@dataclass(frozen=True)
class ChunkLayout:
    """Chunk shape, the chunk's codec chain (serializer first) and the sharding, if any."""

    chunk_shape: tuple[int, ...]
    codecs: tuple
    shard: ShardLayout | None


def chunk_layout(arr: zarr.Array) -> ChunkLayout | None:
    """The layout of a zarr v3 array on a regular grid, or None for anything else (zarr v2, other
    grids, sharding nested in other codecs, shard indexes not ``[bytes(little), crc32c?]``)."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec
    from zarr.core.chunk_grids import RegularChunkGrid

    meta = arr.metadata
    if meta.zarr_format != 3 or not isinstance(meta.chunk_grid, RegularChunkGrid):
        return None
    outer = tuple(meta.chunk_grid.chunk_shape)
    codecs = tuple(meta.codecs)
    if not (codecs and isinstance(codecs[0], ShardingCodec)):
        return ChunkLayout(outer, codecs, None)
    if len(codecs) != 1:
        return None
    sc = codecs[0]
    ic = tuple(sc.index_codecs)
    if not (isinstance(ic[0], BytesCodec) and len(ic) <= 2 and all(isinstance(c, Crc32cCodec) for c in ic[1:])):
        return None
    if ic[0].endian is not None and ic[0].endian.value != "little":
        return None
    inner = tuple(sc.chunk_shape)
    per = tuple(o // c for o, c in zip(outer, inner))
    crc = len(ic) == 2
    shard = ShardLayout(outer, per, 16 * int(np.prod(per)) + (4 if crc else 0), crc,
                        sc.index_location.value == "end")
    return ChunkLayout(inner, tuple(sc.codecs), shard)
