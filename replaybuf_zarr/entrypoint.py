"""Opening and creating zarr stores for replaybuf: the backend's entry point (``ZarrEntrypoint``),
which takes ``zarr.Group`` objects, zarr stores, paths to zarr directories / ``.zip`` files and
object-storage URLs (:mod:`.object_store`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import zarr
from zarr.abc.store import Store

from replaybuf_core import locking
from replaybuf_core.locations import is_object_url, local_path, url_scheme
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS, CAP_PERSISTENT, CAP_SHARDS, GROUPS, BackendEntrypoint

from .backend import ZarrBackend
from .members import metadata_file_error
from .zarr_compat import start_io_loop

__all__ = ["ZarrEntrypoint", "open_store"]


def _looks_like_zarr_path(obj: Any) -> bool:
    if not isinstance(obj, (str, os.PathLike)):
        return False
    if is_object_url(obj):
        return True  # the zarr backend is the one that opens object storage
    s = os.fspath(obj)
    if url_scheme(s) is not None:
        return False
    p = Path(os.path.expanduser(s))
    if s.endswith((".zarr", ".zarr/", ".zarr.zip")) or p.suffix == ".zip":
        return True
    return p.is_dir() and ((p / "zarr.json").exists() or (p / ".zgroup").exists())


def open_store(obj: Any, *, read_only: bool, storage_options: dict | None = None) -> Store:
    """A zarr store for a path (directory → ``LocalStore``, ``.zip`` → ``ZipStore``), an object-storage
    URL (``s3://`` ... → ``ObjectStore`` over obstore, :mod:`.object_store`) or a store.

    Raises:
        ValueError: a URL of an unknown scheme, or ``storage_options`` for something that is not a URL.
    """
    from zarr.storage import LocalStore, ZipStore

    if isinstance(obj, Store):
        return obj.with_read_only(True) if read_only and not obj.read_only else obj
    if is_object_url(obj):
        from .object_store import open_object_store

        return open_object_store(os.fspath(obj), read_only=read_only, storage_options=storage_options)
    if storage_options:
        raise ValueError(f"storage_options are for object-storage URLs (s3://, gs://, az://), not {obj!r}")
    path = Path(local_path(obj, "store"))
    if path.suffix == ".zip":
        if not read_only:
            raise ValueError(f"{path}: .zip stores open read-only; save to a directory to write")
        return ZipStore(path, mode="r")
    return LocalStore(path, read_only=read_only)


def _object_store_to_create(url: str, if_exists: str, storage_options: dict | None) -> Store:
    """The store at ``url`` to create a buffer in: refused when the prefix holds objects but no zarr
    store, or a store another writer holds the lease of (nothing is written then)."""
    import obstore

    from .lease import acquire_lease
    from .object_store import describe_failure, open_object_store
    from .zarr_compat import store_get

    store = open_object_store(url, read_only=False, storage_options=storage_options)
    try:
        first = next(iter(obstore.list(store.store, chunk_size=3)), [])
    except Exception as exc:  # noqa: BLE001 - a missing bucket, wrong credentials, no endpoint
        raise describe_failure(url, store, exc) from exc
    if first:
        if store_get(store, "zarr.json") is None:
            shown = ", ".join(m["path"] for m in first)
            raise FileExistsError(f"{url} holds objects ({shown} ...) and no zarr store; refusing to write there")
        if if_exists == "replace":
            acquire_lease(store).release()  # never replace a store another writer holds (StoreLockedError)
    return store


class ZarrEntrypoint(BackendEntrypoint):
    """Opens ``zarr.Group`` objects, zarr stores and paths to zarr directories / ``.zip`` files;
    creates roots in a store (``MemoryStore`` by default) or a directory path."""

    name = "zarr"
    description = "Zarr v3 groups (MemoryStore, LocalStore, ZipStore, s3:// gs:// az:// object storage); reads zarr v2"
    capabilities = frozenset({CAP_CHUNKS, CAP_CODECS, CAP_SHARDS, CAP_PERSISTENT})

    def guess_can_open(self, obj: Any) -> bool:
        return isinstance(obj, (zarr.Group, Store)) or _looks_like_zarr_path(obj)

    def open(self, obj: Any, *, read_only: bool = False, storage_options: dict | None = None) -> ZarrBackend:
        start_io_loop()
        if isinstance(obj, zarr.Group):
            if read_only and not obj.store.read_only:
                obj = zarr.open_group(obj.store.with_read_only(True), path=obj.path, mode="r")
            return ZarrBackend(obj, read_only=read_only or None)
        url = os.fspath(obj) if is_object_url(obj) else None
        if not isinstance(obj, Store) and url is None:
            path = Path(local_path(obj, "store"))
            if not path.exists():
                raise FileNotFoundError(f"no zarr store at {path}")
        store = open_store(obj, read_only=read_only, storage_options=storage_options)
        try:
            group = zarr.open_group(store, mode="r" if read_only else "r+")
        except FileNotFoundError as exc:
            if url is not None:
                from .object_store import describe_failure

                raise describe_failure(url, store, exc) from None
            raise FileNotFoundError(f"{obj}: no zarr group found (no zarr.json / .zgroup)") from None
        except ValueError as exc:  # an empty or damaged zarr.json (JSONDecodeError is a ValueError)
            raise metadata_file_error(store, "", exc) from exc
        except Exception as exc:  # noqa: BLE001 - obstore's errors (endpoint, credentials) named with the URL
            if url is None:
                raise
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OSError(f"{url}: the object store cannot be read: {first}") from exc
        return ZarrBackend(group, read_only=read_only or None)

    def create(self, store: Any = None, *, if_exists: str = "replace", root: zarr.Group | None = None,
               **kwargs: Any) -> ZarrBackend:
        from zarr.storage import MemoryStore

        start_io_loop()
        unknown = sorted(set(kwargs) - {"storage_options"})
        if unknown:  # e.g. path=...: silently ignored, it made an in-memory store instead
            raise TypeError(f"the zarr backend's create takes no argument(s) {unknown}; the store (a path, URL or "
                            "zarr store) is the second positional argument: create_empty('zarr', 'x.zarr')")
        if root is None and isinstance(store, zarr.Group):
            root = store
            if if_exists == "replace":
                for name in list(root):
                    del root[name]
        if root is None:
            if store is None:
                store = MemoryStore()
            elif is_object_url(store):
                store = _object_store_to_create(os.fspath(store), if_exists, kwargs.pop("storage_options", None))
            elif not isinstance(store, Store):
                path = Path(local_path(store, "store"))
                if if_exists == "replace" and path.exists() and not (path / "zarr.json").exists() \
                        and not (path / ".zgroup").exists() and any(path.iterdir()):
                    raise FileExistsError(f"{path} exists and is not a zarr store; refusing to replace it")
                if if_exists == "replace" and path.exists():
                    if path.is_dir():  # never replace a store another process is writing to
                        held = locking.acquire(path)  # StoreLockedError names the holder
                        if held is not None:
                            held.release()
                    shutil.rmtree(path)
                store = open_store(path, read_only=False)
            mode = {"replace": "w", "append": "a", "raise": "w-"}.get(if_exists)
            if mode is None:
                raise ValueError(f"if_exists must be 'replace', 'append' or 'raise', got {if_exists!r}")
            try:
                root = zarr.open_group(store, mode=mode, zarr_format=3)
            except (FileExistsError, zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayError) as exc:
                raise FileExistsError(f"a zarr store already exists at {store}: {exc}") from None
        backend = ZarrBackend(root)
        for group in GROUPS:
            if not backend.has_group(group):
                backend.require_group(group)
        return backend

    def check_schema(self, schema: Any, **options: Any) -> None:
        """Check a schema and the options of :meth:`ZarrBackend.create_schema_arrays`, creating nothing
        (:func:`~replaybuf_zarr.creation.check_schema_arrays`; ValueError / TypeError naming the spec)."""
        from .creation import check_schema_arrays

        check_schema_arrays(schema, **options)

    def as_data_group(self, group: zarr.Group) -> ZarrBackend:
        """A backend whose ``data`` group is the arbitrary ``group`` (the seed's
        ``rechunk_recompress_array`` rewrites arrays of any group through it)."""
        return _GroupAsData(group)

    def break_lock(self, location: Any, *, storage_options: dict | None = None, force: bool = False) -> str | None:
        """Break the writer lock of the store at ``location``; returns who held it (None: nobody).
        On object storage the lease (:func:`~replaybuf_zarr.lease.break_lease`: a lapsed one, a dead
        writer's, any with ``force``); in a local directory the lock of a live process, only with
        ``force``, by ending that process (:func:`replaybuf_core.locking.break_lock`: a dead writer's
        lock is gone with it).

        Raises:
            StoreLockedError: a live writer's lock or an unlapsed lease and ``force`` is False (the
                message names the holder), or a local holder that cannot be ended from here.
        """
        if not is_object_url(location):
            if storage_options:
                raise ValueError(f"storage_options are for object-storage URLs, not {location!r}")
            return locking.break_lock(Path(local_path(location, "store")), force=force)
        from .lease import break_lease

        return break_lease(os.fspath(location), storage_options=storage_options, force=force)


    def delete_store(self, location: Any, *, storage_options: dict | None = None) -> int:
        """Delete the store at the object-storage URL ``location`` (under its lease, root metadata
        first); returns the objects deleted.  See :func:`~replaybuf_zarr.removal.delete_object_store`.

        Raises:
            ValueError: ``location`` is a local path (remove its directory).
            FileNotFoundError: no zarr store there.  StoreLockedError: a writer holds its lease.
            OSError: the object store cannot be reached (named).
        """
        if not is_object_url(location):
            raise ValueError(f"{location}: a local store is a directory: remove it (rm -r); delete is for "
                             "s3:// gs:// az:// stores, which have no directory to remove")
        from .removal import delete_object_store

        return delete_object_store(os.fspath(location), storage_options=storage_options)


class _GroupAsData(ZarrBackend):
    """A ZarrBackend whose ``data`` group is an arbitrary zarr group."""

    def _group(self, group: str) -> zarr.Group:
        return self._root
