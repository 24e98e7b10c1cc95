"""Copying an array's stored objects byte for byte between two zarr v3 stores.

A copy (``replaybuf copy``, ``copy_from_store``, ``save_to_path``) that keeps an array's codecs,
chunks and shards would otherwise decode every chunk and encode it again: for exact codecs a waste
of CPU, for lossy ones (JPEG, video chunks, a LeRobot import's pass-through packets) a second
lossy generation of every frame.  When the destination array's metadata equals the source's
(``zarr.json`` as the Zarr v3 spec defines it, but for ``shape`` and ``attributes``) and both use
the default chunk key encoding (``c/<i>/<j>...``), every object holding some of the rows copied is
copied as it is stored.  An object past those rows is left out; the last one copied may hold rows
past the new end, outside the array's shape (never read).
"""

from __future__ import annotations

from typing import Any

from .members import list_keys
from .zarr_compat import buffer_prototype, sync

__all__ = ["copy_objects"]

#: metadata fields that may differ between a source array and its byte-for-byte copy
_FREE = ("shape", "attributes")


def _layout(arr: Any) -> dict | None:
    doc = arr.metadata.to_dict()
    if doc.get("zarr_format") != 3:
        return None
    enc = doc.get("chunk_key_encoding") or {}
    if enc.get("name") != "default" or (enc.get("configuration") or {}).get("separator", "/") != "/":
        return None
    return {k: v for k, v in doc.items() if k not in _FREE}


def copy_objects(src_arr: Any, dst_arr: Any, n_rows: int) -> bool:
    """Copy the stored objects of ``src_arr`` holding rows ``[0, n_rows)`` into ``dst_arr`` (zarr v3
    arrays, the destination just created and empty).  False — nothing written — when their
    metadata differ (codecs, chunk grid, dtype, fill value...) or a chunk key is not the default
    encoding's; True when copied."""
    src_doc, dst_doc = _layout(src_arr), _layout(dst_arr)
    if src_doc is None or src_doc != dst_doc:
        return False
    per_object = int((getattr(src_arr, "shards", None) or src_arr.chunks)[0])
    needed = -(-int(n_rows) // per_object)
    src_prefix, dst_prefix = src_arr.path + "/c/", dst_arr.path + "/c/"
    keys = []
    for key in list_keys(src_arr.store, src_prefix):
        first = key[len(src_prefix):].split("/", 1)[0]
        if not first.isdigit():
            return False
        if int(first) < needed:
            keys.append(key)
    proto = buffer_prototype()
    for key in keys:
        buf = sync(src_arr.store.get(key, prototype=proto))
        if buf is not None:
            sync(dst_arr.store.set(dst_prefix + key[len(src_prefix):], buf))
    return True
