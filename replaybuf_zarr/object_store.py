"""Zarr stores on object storage (``s3://``, ``gs://``, ``az://``): zarr-python's ``ObjectStore`` over
obstore, errors that name the URL, and the writer's lease.

**Configuration.**  ``obstore.store.from_url(url, **storage_options)``: credentials, region and
endpoint come from ``storage_options`` or from the usual environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``; ``AWS_ALLOW_HTTP=true`` for an
``http://`` endpoint such as a local test server; Google's and Azure's own variables for ``gs://`` /
``az://``), so a local S3 server works with no code.

**The lease** (one writer per store; readers take none).  Object stores have no file locks and no
rename, but they have create-only PUTs (``If-None-Match: *``).  A writable open creates
``<prefix>/.replaybuf.lease`` holding a random token, the host, the pid and the time, with a
create-only PUT; if it exists, the open fails naming the holder and the lease's age.  A lease left by
a dead writer (kills leave it: nothing on the server can notice) is broken explicitly with
:func:`break_lease` (``replaybuf unlock URL``).  A PUT whose reply was lost (an error other than
"already exists") is settled by reading the lease back: our token means we hold it, so a lost reply to
a successful PUT never looks like a foreign writer.  Closing the buffer deletes the lease if it still
holds our token.  Within one process, writable opens of one URL share the lease (reference counted),
as the local writer lock does.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from replaybuf_core.errors import StoreLockedError
from replaybuf_core.locations import is_object_url

__all__ = ["open_object_store", "Lease", "acquire_lease", "break_lease", "release_all_leases", "LEASE_NAME",
           "store_url", "store_options"]

LEASE_NAME = ".replaybuf.lease"
logger = logging.getLogger(__name__)
_held: dict[str, list] = {}  # url -> [lease, count]
_held_lock = threading.Lock()


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

    try:
        inner = obstore.store.from_url(url, **dict(storage_options or {}))
    except (TypeError, ValueError, obstore.exceptions.BaseError) as exc:
        raise ValueError(f"{url}: cannot configure the object store: {type(exc).__name__}: {exc}") from exc
    store = ObjectStore(inner, read_only=read_only)
    store.replaybuf_url = url.rstrip("/")
    store.replaybuf_storage_options = dict(storage_options) if storage_options else None
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


class Lease:
    """A held writer lease (see the module docstring)."""

    def __init__(self, url: str, store: Any, token: str):
        self.url, self._store, self.token = url, store, token

    @property
    def path(self) -> str:
        return f"{self.url}/{LEASE_NAME}"

    def release(self) -> None:
        """Drop one reference; the last deletes the lease object when it still holds our token."""
        with _held_lock:
            entry = _held.get(self.url)
            if entry is None or entry[0] is not self:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _held[self.url]
        obstore = _obstore()
        try:
            if _read(self._store, obstore).get("token") == self.token:
                obstore.delete(self._store, LEASE_NAME)
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - e.g. the endpoint is gone: the lease stays, named
            logger.warning("%s: could not delete the writer lease (%s: %s); break it with `replaybuf unlock %s`",
                           self.url, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", self.url)


def release_all_leases() -> None:
    """Release every lease this process holds, whatever the open buffers (a test session ending
    before its server stops; buffers left open release theirs when collected otherwise)."""
    with _held_lock:
        leases = [entry[0] for entry in _held.values()]
    for lease in leases:
        while lease.url in _held:
            lease.release()


def _read(store: Any, obstore) -> dict:
    raw = bytes(obstore.get(store, LEASE_NAME).bytes())
    try:
        out = json.loads(raw)
    except ValueError:
        return {"token": None, "note": f"unreadable lease ({len(raw)} bytes)"}
    return out if isinstance(out, dict) else {"token": None}


def _holder(info: dict) -> str:
    age = time.time() - float(info.get("created_unix", time.time()))
    return (f"host {info.get('host', '?')} pid {info.get('pid', '?')}, created {info.get('created', '?')} "
            f"({age:.0f} s ago)")


def acquire_lease(store: Any) -> Lease:
    """Take the writer lease of ``store`` (an :func:`open_object_store` store).

    Raises:
        StoreLockedError: another writer holds it (named with its host, pid and age).
    """
    url = store_url(store)
    with _held_lock:
        entry = _held.get(url)
        if entry is not None:
            entry[1] += 1
            return entry[0]
    obstore = _obstore()
    inner = store.store
    token = uuid.uuid4().hex
    now = time.time()
    body = json.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(),
                       "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                       "created_unix": now}).encode()
    try:
        obstore.put(inner, LEASE_NAME, body, mode="create")
    except obstore.exceptions.AlreadyExistsError:
        info = _read(inner, obstore)
        here = "" if info.get("host") != socket.gethostname() else (
            " (running)" if _alive_here(info) else " (not running on this host: dead)")
        raise StoreLockedError(f"{url} is being written by another writer: its lease {url}/{LEASE_NAME} is held by "
                               f"{_holder(info)}{here}; if that writer is dead, break the lease with "
                               f"`replaybuf unlock {url}`") from None
    except Exception as exc:
        # the reply may have been lost after the PUT succeeded: our token in the lease settles it
        try:
            ours = _read(inner, obstore).get("token") == token
        except Exception:  # noqa: BLE001 - no lease (or none readable): the PUT failed
            ours = False
        if not ours:
            raise exc
    lease = Lease(url, inner, token)
    with _held_lock:
        _held[url] = [lease, 1]
    return lease


def _alive_here(info: dict) -> bool:
    """True when the lease's holder is a running process of this host."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def break_lease(url: str, storage_options: dict | None = None, force: bool = False) -> str | None:
    """Delete the lease of the store at ``url`` (its writer is dead); returns who held it (None: no
    lease).  A holder that is a running process of this host is not broken unless ``force``; a
    holder on another host cannot be checked: the caller makes sure it is dead (a live writer would
    go on writing).

    Raises:
        StoreLockedError: the holder runs on this host and ``force`` is False.
        OSError: the object store cannot be reached or read (endpoint, credentials, bucket; named).
    """
    obstore = _obstore()
    store = open_object_store(url, read_only=False, storage_options=storage_options)
    try:
        info = _read(store.store, obstore)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - obstore's errors (endpoint, credentials, bucket): named with the URL
        raise describe_failure(url, store, exc) from exc
    if not force and _alive_here(info):
        raise StoreLockedError(f"{url}: the lease is held by {_holder(info)}, a process of this host that is still "
                               "running; stop it first (or pass --force / force=True)")
    try:
        obstore.delete(store.store, LEASE_NAME)
    except Exception as exc:  # noqa: BLE001
        raise describe_failure(url, store, exc) from exc
    return _holder(info)
