"""``rechunk_recompress_array``: the seed's zarr-level rechunk, streaming and crash-tolerant."""

from __future__ import annotations

from typing import Any

import zarr

from replaybuf_core.store.buffer import rechunk_array
from replaybuf_core.layout.compressors import resolve_compressor

from .backend import ZarrBackend


def rechunk_recompress_array(
    group: zarr.Group,
    name: str,
    chunks: tuple[int, ...] | None = None,
    chunk_length: int | None = None,
    compressor: Any = None,
    tmp_key: str = "_temp",
) -> zarr.Array:
    """Rewrite array ``group[name]`` with new chunks and/or compressor and return the new array.

    Args:
        group: the zarr group holding the array (any group, not only a buffer's ``data``).
        name: the array's name in ``group``.
        chunks: the new chunk shape; ``chunk_length`` sets only the time-axis length instead.
        compressor: a preset name, a codec, or None to keep the current codec.
        tmp_key: name of the temporary array written beside the original.

    The array is streamed block by block into ``tmp_key`` and swapped in, so memory stays bounded and
    a failure midway leaves the original untouched.  Raises ValueError/TypeError for bad chunks,
    KeyError when ``name`` is not an array of ``group``.
    """
    store = _GroupAsData(group)
    arr = store.get_array("data", name)
    if chunks is None:
        chunks = tuple(arr.chunks)
        if chunk_length is not None:
            chunks = (int(chunk_length),) + chunks[1:]
    kwargs: dict[str, Any] = {}
    if compressor is not None:
        kwargs["codec"] = resolve_compressor(compressor)
    if tuple(chunks) != tuple(arr.chunks) or kwargs:
        rechunk_array(store, "data", name, chunks=tuple(chunks), tmp_key=tmp_key, **kwargs)
    return group[name]


class _GroupAsData(ZarrBackend):
    """A ZarrBackend whose ``data`` group is an arbitrary zarr group."""

    def __init__(self, group: zarr.Group):
        super().__init__(group)

    def _group(self, group: str) -> zarr.Group:
        return self._root
