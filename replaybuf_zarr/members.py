"""Members of a zarr group: renaming them (zarr 3.1 has no ``move``), where a store lives on disk, and
the errors that name a member whose metadata does not load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import zarr

from .zarr_compat import buffer_prototype, sync


def metadata_file_error(store: Any, node: str, exc: Exception) -> Exception:
    """A CorruptStoreError naming the metadata file of ``node`` ("" for the root) that does not
    parse: its path on disk for a LocalStore, and whether it is empty."""
    from replaybuf_core.errors import CorruptStoreError

    local = local_root(store)
    names = [f"{node}/zarr.json" if node else "zarr.json", f"{node}/.zgroup" if node else ".zgroup"]
    where = f"{node or 'the root group'}'s zarr.json"
    if local is not None:
        for name in names:
            f = local / name
            if f.exists():
                size = f.stat().st_size
                what = "is empty" if size == 0 else (
                    "holds only zero bytes" if not f.read_bytes().strip(b"\0") else "is not valid JSON")
                return CorruptStoreError(f"{f}: {what} ({size} bytes) — the zarr metadata of "
                                         f"{node or 'the store root'} is damaged: {exc}")
    return CorruptStoreError(f"{where} cannot be read (damaged metadata): {type(exc).__name__}: {exc}")


def node_error(group: str, name: str, exc: Exception) -> Exception:
    """A CorruptStoreError naming ``group/name`` for metadata zarr cannot load (unknown codec,
    malformed ``zarr.json``)."""
    from replaybuf_core.errors import CorruptStoreError

    if type(exc).__name__ == "UnknownCodecError" or "codec" in str(exc).lower():
        return CorruptStoreError(
            f"{group}/{name}: its zarr.json names a codec this installation does not know ({exc}); "
            "install the package that registers it (numcodecs / imagecodecs, or the replaybuf plugin "
            "that wrote the store, e.g. the WebP codec's) and open it again")
    return CorruptStoreError(f"{group}/{name}: its zarr metadata ({group}/{name}/zarr.json) cannot be "
                             f"read: {type(exc).__name__}: {exc}")


def rename_member(g: zarr.Group, src: str, dst: str) -> None:
    """Move member ``src`` of zarr group ``g`` to the free name ``dst`` (zarr 3.1 has no ``move``):
    one atomic directory rename on a ``LocalStore``, else a copy of every stored key, then deletes."""
    store = g.store
    src_key = f"{g.path}/{src}" if g.path else src
    dst_key = f"{g.path}/{dst}" if g.path else dst
    local = local_root(store)
    if local is not None:
        os.rename(local / src_key, local / dst_key)
        return
    keys = sync(collect(store.list_prefix(src_key + "/")))
    proto = buffer_prototype()
    for key in keys:
        buf = sync(store.get(key, prototype=proto))
        sync(store.set(dst_key + key[len(src_key):], buf))
    for key in keys:
        sync(store.delete(key))


async def collect(agen) -> list[str]:
    return [k async for k in agen]


def local_root(store: Any) -> Path | None:
    from zarr.storage import LocalStore

    if isinstance(store, LocalStore):
        return Path(store.root)
    return None
