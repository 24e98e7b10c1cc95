"""Members of a zarr group: renaming them (zarr 3.1 has no ``move``), where a store lives on disk, the
errors that name a member whose metadata does not load, and removing the debris a killed writer leaves."""

from __future__ import annotations

import os
import re
import shutil
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


#: the metadata objects of a zarr node (v3, v2): what makes a prefix an array or a group
METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs")


def is_metadata_key(key: str) -> bool:
    """Whether the store key ``key`` is a node's metadata object (not a chunk or shard)."""
    return key.rsplit("/", 1)[-1] in METADATA_NAMES


def rename_member(g: zarr.Group, src: str, dst: str) -> None:
    """Move member ``src`` of zarr group ``g`` to the free name ``dst`` (zarr 3.1 has no ``move``).

    On a ``LocalStore``: one atomic directory rename.  Elsewhere (object storage, memory) there is no
    rename, so the objects are copied and deleted, in the one order that keeps every *visible* node
    whole at every instant, whenever the process dies: objects left under ``dst`` by an earlier cut
    copy are deleted first (``dst`` holds no node: the name is free), then the chunks and shards are
    copied and the metadata (``zarr.json``) last, so ``dst`` appears only complete; then the source's
    metadata is deleted first, so ``src`` disappears before any of its chunks does.  What a cut leaves
    is an invisible prefix without metadata, which recovery deletes (``remove_debris``).
    """
    store = g.store
    src_key = f"{g.path}/{src}" if g.path else src
    dst_key = f"{g.path}/{dst}" if g.path else dst
    local = local_root(store)
    if local is not None:
        os.rename(local / src_key, local / dst_key)
        return
    for key in list_keys(store, dst_key + "/"):  # debris of a cut copy, never a node
        sync(store.delete(key))
    keys = list_keys(store, src_key + "/")
    meta = [k for k in keys if is_metadata_key(k)]
    data = [k for k in keys if not is_metadata_key(k)]
    proto = buffer_prototype()
    for key in data + meta:  # metadata last: dst is visible only once whole
        buf = sync(store.get(key, prototype=proto))
        sync(store.set(dst_key + key[len(src_key):], buf))
    for key in meta + data:  # metadata first: src is invisible before it loses a chunk
        sync(store.delete(key))


def delete_prefix(store: Any, prefix: str) -> None:
    """Delete every object under ``prefix/``, metadata first (a cut delete leaves no visible node
    with chunks missing, only debris without metadata)."""
    keys = list_keys(store, prefix + "/")
    for key in sorted(keys, key=lambda k: not is_metadata_key(k)):
        sync(store.delete(key))


def list_keys(store: Any, prefix: str) -> list[str]:
    """Every key under ``prefix`` (synchronously; the listing is made inside zarr's event loop, as
    obstore's listings must be)."""
    async def run() -> list[str]:
        return [k async for k in store.list_prefix(prefix)]

    return sync(run())


def list_children(store: Any, prefix: str) -> list[str]:
    """The names directly under ``prefix`` (objects and sub-prefixes), synchronously."""
    async def run() -> list[str]:
        return [k async for k in store.list_dir(prefix)]

    return sync(run())


def local_root(store: Any) -> Path | None:
    """The directory of ``store`` when it is a zarr ``LocalStore``, else None (memory, object storage)."""
    from zarr.storage import LocalStore

    if isinstance(store, LocalStore):
        return Path(store.root)
    return None


def remove_debris(g: zarr.Group, local: Path | None) -> list[str]:
    """Delete what a killed process leaves among the members of ``g`` (its store's directory ``local``
    when on a ``LocalStore``, else None): members that are no zarr node (on disk, subdirectories
    without metadata and ``*.partial`` files of zarr's atomic writes; elsewhere, prefixes without
    metadata: an array whose deletion or copy (:func:`rename_member`) was cut short).  Returns the
    removed names."""
    if local is None:
        return _remove_object_debris(g)
    base = local / g.path if g.path else local
    removed = []
    for entry in sorted(base.iterdir()) if base.is_dir() else []:
        if entry.is_dir() and not any((entry / m).exists() for m in ("zarr.json", ".zarray", ".zgroup")):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        elif entry.is_file() and entry.name.endswith(".partial"):
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


#: the temporary file of zarr-python's atomic write of a metadata file (``uuid4().hex``, then a rename)
_PARTIAL_METADATA = re.compile(r"(zarr|\.zgroup|\.zattrs|\.zarray)\.[0-9a-f]{32}\.partial")


def remove_partial_metadata(local: Path | None) -> list[str]:
    """Delete the ``*.partial`` files that zarr's atomic writes of the root's own metadata
    (``zarr.<hex>.partial``, ``.zgroup.<hex>.partial``...) leave beside it when the writer is killed
    between writing and renaming (``local``: the ``LocalStore`` directory; None: nothing to do, object
    stores write whole objects).  Nothing else at the root is touched: it may hold what is not the
    store's.  Returns the removed names."""
    if local is None or not local.is_dir():
        return []
    removed = []
    for entry in sorted(local.iterdir()):
        if _PARTIAL_METADATA.fullmatch(entry.name) and entry.is_file():
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


def _remove_object_debris(g: zarr.Group) -> list[str]:
    store = g.store
    base = f"{g.path}/" if g.path else ""
    removed = []
    for child in list_children(store, g.path):
        if is_metadata_key(child):
            continue
        prefix = base + child.rstrip("/")
        if not any(sync(store.exists(f"{prefix}/{m}")) for m in METADATA_NAMES):
            delete_prefix(store, prefix)
            removed.append(child.rstrip("/"))
    return removed
