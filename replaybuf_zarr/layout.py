"""The storage layout of a zarr array, read from its metadata document as the Zarr specs define it.

The fast chunk reader and writer need an array's chunk grid, chunk key encoding, codec chain (names
and configurations), sharding and data type.  They read them from the array's ``zarr.json`` (Zarr v3)
or ``.zarray`` (Zarr v2) document, never from zarr-python's Python objects — those are renamed from
one minor release to the next, the JSON is not.

Sources: Zarr v3 core specification ("Array metadata": ``data_type``, ``chunk_grid``,
``chunk_key_encoding``, ``codecs``; "Chunk key encoding": ``default`` and ``v2``), the sharding codec
specification (``sharding_indexed``: ``chunk_shape``, ``codecs``, ``index_codecs``,
``index_location``), and the Zarr v2 specification (``.zarray``: ``chunks``, ``dtype``,
``compressor``, ``filters``, ``order``, ``dimension_separator``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from .zarr_compat import store_get

#: Zarr v3 core data types with a fixed-size NumPy equivalent (spec "Core data types").
V3_DATA_TYPES = {
    "bool": "bool", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8",
    "float16": "f2", "float32": "f4", "float64": "f8", "complex64": "c8", "complex128": "c16",
}


def codec_entry(codec: Any) -> dict[str, Any]:
    """One codec of a ``codecs`` list as ``{"name": str, "configuration": dict}`` (the spec allows a
    bare name string for a codec without configuration).

    Raises:
        ValueError: the entry is neither a string nor an object with a string ``name``.
    """
    if isinstance(codec, str):
        return {"name": codec, "configuration": {}}
    if isinstance(codec, dict) and isinstance(codec.get("name"), str):
        return {"name": codec["name"], "configuration": dict(codec.get("configuration") or {})}
    raise ValueError(f"not a zarr v3 codec entry: {codec!r}")


@dataclass(frozen=True)
class ChunkKeys:
    """The chunk key encoding of one array: grid coordinates → store key (path prefix included).

    ``encoding`` is ``"default"`` (``c/0/1``; separator ``/`` or ``.``) or ``"v2"`` (``0.1``; a 0-d
    array's one chunk is ``0``), per the Zarr v3 core spec; Zarr v2 arrays use ``"v2"`` with their
    ``dimension_separator``.
    """

    prefix: str
    encoding: str
    separator: str

    def __call__(self, coords: tuple[int, ...]) -> str:
        parts = [str(int(c)) for c in coords]
        if self.encoding == "default":
            return self.prefix + self.separator.join(["c", *parts])
        return self.prefix + (self.separator.join(parts) if parts else "0")


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
    """What the fast paths need of one array.

    ``chunk_shape`` is the (inner) chunk shape; ``codecs`` the chunk's codec chain as spec entries
    (``{"name", "configuration"}``, serializer first; for Zarr v2 a ``bytes`` serializer with the
    stored byte order, then ``{"name": "numcodecs", "configuration": <v2 compressor>}``);
    ``dtype`` the NumPy dtype of the stored values; ``keys`` the key of a stored object (a chunk,
    or a shard when ``shard`` is set); ``zarr_format`` 2 or 3.
    """

    zarr_format: int
    chunk_shape: tuple[int, ...]
    codecs: tuple[dict[str, Any], ...]
    shard: ShardLayout | None
    dtype: np.dtype
    keys: ChunkKeys


def array_document(arr: Any) -> dict[str, Any] | None:
    """The metadata document of a zarr array — its ``zarr.json`` (v3) or ``.zarray`` (v2) — read
    from its store, or None when there is none or it is not a JSON object."""
    prefix = f"{arr.path}/" if arr.path else ""
    for name in ("zarr.json", ".zarray"):
        try:
            raw = store_get(arr.store, prefix + name)
        except Exception:  # a store that cannot say (closed, permission): no fast path
            return None
        if raw is None:
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None
    return None


def object_keys(arr: Any) -> ChunkKeys | None:
    """The chunk key encoding of any zarr array (whatever its data type or codecs), from its metadata
    document; None when there is no document or its encoding is not ``default`` / ``v2``."""
    doc = array_document(arr)
    if doc is None:
        return None
    try:
        return _keys(arr, doc)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _keys(arr: Any, doc: dict[str, Any]) -> ChunkKeys | None:
    if doc.get("zarr_format") == 2:
        return ChunkKeys(_prefix(arr), "v2", doc.get("dimension_separator") or ".")
    enc = doc.get("chunk_key_encoding") or {"name": "default"}
    name = enc.get("name")
    if name not in ("default", "v2"):
        return None
    sep = (enc.get("configuration") or {}).get("separator", "/" if name == "default" else ".")
    if sep not in ("/", "."):
        return None
    return ChunkKeys(_prefix(arr), name, sep)


def chunk_layout(arr: Any) -> ChunkLayout | None:
    """The layout of a zarr array on a regular grid, or None for anything the fast paths do not
    handle (other grids, data types without a fixed-size NumPy form, array→array codecs such as
    ``transpose``, sharding nested in other codecs, shard indexes not ``[bytes(little), crc32c?]``,
    v2 filters or Fortran order).  Codec names are not checked here: the encoders and decoders
    (:mod:`replaybuf_zarr.spec_codecs`) say None for what they do not know."""
    doc = array_document(arr)
    if doc is None:
        return None
    try:
        if doc.get("zarr_format") == 3 and doc.get("node_type") == "array":
            return _v3_layout(arr, doc)
        if doc.get("zarr_format") == 2:
            return _v2_layout(arr, doc)
    except (KeyError, TypeError, ValueError, AttributeError):  # a document we do not understand: zarr-python decides
        return None
    return None


def _prefix(arr: Any) -> str:
    return f"{arr.path}/" if arr.path else ""


def _v3_layout(arr: Any, doc: dict[str, Any]) -> ChunkLayout | None:
    dtype_name = doc["data_type"]
    if not isinstance(dtype_name, str) or dtype_name not in V3_DATA_TYPES:
        return None
    grid = doc["chunk_grid"]
    if grid.get("name") != "regular":
        return None
    outer = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
    if doc.get("storage_transformers"):
        return None
    keys = _keys(arr, doc)
    if keys is None:
        return None
    dtype = np.dtype(V3_DATA_TYPES[dtype_name])
    codecs = tuple(codec_entry(c) for c in doc["codecs"])
    if not codecs or codecs[0]["name"] != "sharding_indexed":
        return ChunkLayout(3, outer, codecs, None, dtype, keys)
    if len(codecs) != 1:
        return None
    conf = codecs[0]["configuration"]
    inner = tuple(int(c) for c in conf["chunk_shape"])
    index_codecs = [codec_entry(c) for c in conf.get("index_codecs", [{"name": "bytes"}, {"name": "crc32c"}])]
    if not index_codecs or index_codecs[0]["name"] != "bytes" or len(index_codecs) > 2:
        return None
    if index_codecs[0]["configuration"].get("endian", "little") != "little":
        return None
    if any(c["name"] != "crc32c" for c in index_codecs[1:]):
        return None
    if len(inner) != len(outer) or any(o % c for o, c in zip(outer, inner)):
        return None
    per = tuple(o // c for o, c in zip(outer, inner))
    crc = len(index_codecs) == 2
    location = conf.get("index_location", "end")
    if location not in ("start", "end"):
        return None
    shard = ShardLayout(outer, per, 16 * int(np.prod(per)) + (4 if crc else 0), crc, location == "end")
    return ChunkLayout(3, inner, tuple(codec_entry(c) for c in conf["codecs"]), shard, dtype, keys)


def _v2_layout(arr: Any, doc: dict[str, Any]) -> ChunkLayout | None:
    if doc.get("filters") or doc.get("order", "C") != "C":
        return None
    try:
        stored = np.dtype(doc["dtype"])
    except TypeError:  # structured dtypes are lists
        return None
    if stored.kind not in "biufc" or stored.fields is not None:
        return None
    keys = _keys(arr, doc)
    endian = "big" if stored.byteorder == ">" else "little"
    codecs: tuple[dict[str, Any], ...] = ({"name": "bytes", "configuration": {"endian": endian}},)
    if doc.get("compressor") is not None:
        codecs += ({"name": "numcodecs", "configuration": dict(doc["compressor"])},)
    return ChunkLayout(2, tuple(int(c) for c in doc["chunks"]), codecs, None, stored.newbyteorder("="), keys)
