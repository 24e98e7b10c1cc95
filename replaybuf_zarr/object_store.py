"""Zarr stores on object storage (``s3://``, ``gs://``, ``az://``): zarr-python's ``ObjectStore`` over
obstore, and errors that name the URL.

**Configuration.**  ``obstore.store.from_url(url, **storage_options)``: credentials, region and
endpoint come from ``storage_options`` or from the usual environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``; ``AWS_ALLOW_HTTP=true`` for an
``http://`` endpoint such as a local test server; Google's and Azure's own variables for ``gs://`` /
``az://``), so a local S3 server works with no code.

**The writer's lease** (one writer per store, an expiry renewed by a heartbeat, a fence before every
commit) is :mod:`replaybuf_zarr.lease`; a writable open's store is a
:class:`~replaybuf_zarr.fenced_store.FencedObjectStore`, whose writes are conditional once it holds
the lease (what a writer paused past its lease still sends fails at the server).

**A node's local cache** of whole objects (read-only opens; ``storage_options`` keys
``replaybuf_cache_dir`` / ``replaybuf_cache_bytes`` or the ``REPLAYBUF_OBJECT_CACHE_*`` environment):
:mod:`replaybuf_zarr.object_cache`.
"""

from __future__ import annotations

import os
from typing import Any

from replaybuf_core.locations import is_object_url

__all__ = ["open_object_store", "store_url", "store_options", "describe_failure"]


#: the process whose obstore runtime this interpreter started (obstore's tokio runtime does not
#: survive a fork: a forked child that uses it hangs forever — tokio #4301, obstore's own notes)
_used_in_pid: int | None = None


def _obstore():
    """obstore, imported; refused (RuntimeError, never a hang) in a process forked from one that used it."""
    global _used_in_pid
    try:
        import obstore
        import obstore.store  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the extra is in the test command
        raise ImportError("object-storage URLs need obstore: pip install 'replaybuf[s3]'") from exc
    pid = os.getpid()
    if _used_in_pid is not None and _used_in_pid != pid:
        raise RuntimeError(
            f"object storage in a forked process: this process ({pid}) was forked from process {_used_in_pid}, "
            "which had opened an object store (s3://, gs://, az://); obstore's runtime does not survive a fork "
            "and would hang here. Start the processes with spawn instead: "
            "DataLoader(..., multiprocessing_context='spawn') (or 'forkserver'), or "
            "multiprocessing.set_start_method('spawn')")
    _used_in_pid = pid
    return obstore


def open_object_store(url: str, *, read_only: bool, storage_options: dict | None = None) -> Any:
    """A zarr ``ObjectStore`` for ``url`` (see the module docstring for the configuration).

    Raises:
        ValueError: ``url`` is not an object-storage URL, or obstore refuses the options (named).
    """
    if not is_object_url(url):
        raise ValueError(f"{url!r} is not an object-storage URL (s3://, gs://, az://)")
    obstore = _obstore()
    from zarr.storage import ObjectStore

    from .fenced_store import FencedObjectStore
    from .object_cache import cache_from_options

    local_cache, obstore_options = cache_from_options(url, storage_options, read_only)
    try:
        inner = obstore.store.from_url(url, **dict(obstore_options or {}))
    except (TypeError, ValueError, obstore.exceptions.BaseError) as exc:
        raise ValueError(f"{url}: cannot configure the object store: {type(exc).__name__}: {exc}") from exc
    # a writable open's writes become conditional once it holds the lease (a paused writer's fence)
    store = ObjectStore(inner, read_only=True) if read_only else FencedObjectStore(inner)
    store.replaybuf_url = url.rstrip("/")
    store.replaybuf_storage_options = dict(storage_options) if storage_options else None
    store.replaybuf_local_cache = local_cache  # whole objects kept on local disk (object_cache.py), or None
    return store


def store_url(store: Any) -> str | None:
    """The URL a store of :func:`open_object_store` was opened at, else None."""
    return getattr(store, "replaybuf_url", None)


def store_options(store: Any) -> dict | None:
    """The ``storage_options`` a store of :func:`open_object_store` was opened with, else None."""
    return getattr(store, "replaybuf_storage_options", None)


def describe_failure(url: str, store: Any, exc: Exception) -> Exception:
    """A clear error for a failed open of ``url``: a missing bucket or an unreachable endpoint (found
    by listing the prefix), else nothing there (FileNotFoundError)."""
    obstore = _obstore()
    try:
        next(iter(obstore.list(store.store, chunk_size=1)), None)  # the first object only
    except Exception as probe:  # noqa: BLE001 - the listing tells what is wrong
        first = str(probe).splitlines()[0] if str(probe) else type(probe).__name__
        return OSError(f"{url}: the object store cannot be read (bucket missing, wrong credentials or "
                       f"endpoint unreachable): {first}")
    return FileNotFoundError(f"{url}: no zarr store there (no zarr.json)")
