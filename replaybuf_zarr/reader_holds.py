"""Readers holding an older version of a store on object storage, so that ``gc`` never deletes what
one reads (the object-store twin of :mod:`replaybuf_core.store.version_readers`' lock files).

Object stores have no file locks: a reader's hold is an object with an expiry, renewed by a daemon
thread, the way the writer's lease is (:mod:`.lease`; leases: Gray & Cheriton, SOSP 1989).  A reader
opening version ``v`` (``ReplayBuffer("s3://...", version=...)``) PUTs
``<store>/.replaybuf.readers/v<id>-<random>`` holding its host, pid and ``expires_unix`` (now plus
the lease's duration, :func:`~.lease.lease_seconds`: 60 s, ``REPLAYBUF_LEASE_SECONDS``), rewrites it
every third of that while it is open, and deletes it on close.  :func:`held_versions` lists the
holds renewed less than their lease ago — a killed reader's hold lapses by itself, at most one lease
later — and deletes the lapsed ones it sees.  Clocks: when a hold was last renewed is the object's
modification time, the storage server's clock (the reader's own ``expires_unix`` is for people
reading the object): a reader whose clock is off by any amount (a robot's computer without a
real-time clock, a VM resumed with a stale one) neither loses its hold nor keeps it after it died.
A hold is renewed a third of the way through its duration, so ``gc`` on a machine whose clock runs
up to two thirds of the lease ahead of the server's still sees it.

The hold needs the right to write (PUT, DELETE) under the store's prefix: a reader with read-only
credentials reads without one (a warning says so), and ``gc`` cannot see it.
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

from .lease import lease_seconds
from .object_store import _obstore, store_url

__all__ = ["HOLDS_PREFIX", "ObjectHold", "hold_version", "held_versions"]

#: where the holds' objects go, under the store's prefix
HOLDS_PREFIX = ".replaybuf.readers/"
logger = logging.getLogger(__name__)
#: object stores may give modification times rounded down to the second
_ROUNDING_SECONDS = 1.0


def _body(version_id: int, ttl: float) -> bytes:
    now = time.time()
    return json.dumps({"version": int(version_id), "host": socket.gethostname(), "pid": os.getpid(),
                       "renewed_unix": now, "lease_seconds": ttl, "expires_unix": now + ttl}).encode()


class ObjectHold:
    """One reader's hold of one version on object storage, renewed until :meth:`release` (idempotent)."""

    def __init__(self, inner: Any, key: str, version_id: int, ttl: float):
        self._inner, self.key, self.version_id, self.ttl = inner, key, int(version_id), float(ttl)
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"replaybuf-hold {key}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        obstore = _obstore()
        while not self._stop.wait(self.ttl / 3):
            try:
                obstore.put(self._inner, self.key, _body(self.version_id, self.ttl))
            except Exception as exc:  # noqa: BLE001 - the next renewal tries again; the hold may lapse
                logger.warning("could not renew the hold of version %d (%s): gc may drop it if this goes on",
                               self.version_id, exc)

    def release(self) -> None:
        """Stop renewing and delete the hold's object (a failure to delete leaves it to lapse).  In a
        forked child (a DataLoader worker dropping the buffer it inherited) it does nothing: the hold
        is its parent's."""
        if self._stop.is_set() or os.getpid() != self._pid:
            return
        self._stop.set()
        if threading.current_thread() is not self._thread:  # (a garbage collection may run it there)
            self._thread.join(timeout=10)
        try:
            _obstore().delete(self._inner, self.key)
        except Exception:  # noqa: BLE001 - it lapses by itself
            pass


def hold_version(root_store: Any, version_id: int) -> ObjectHold | None:
    """Hold version ``version_id`` of the store whose zarr store is ``root_store``: on object storage
    an :class:`ObjectHold`, else None (a local directory's readers hold theirs with a lock file:
    :mod:`replaybuf_core.store.version_readers`).  Raises what the PUT raises (e.g. no permission to
    write): the caller may read on without a hold."""
    if store_url(root_store) is None:
        return None
    inner = root_store.store
    ttl = lease_seconds()
    key = f"{HOLDS_PREFIX}v{int(version_id)}-{uuid.uuid4().hex[:12]}"
    _obstore().put(inner, key, _body(version_id, ttl))
    return ObjectHold(inner, key, version_id, ttl)


def held_versions(root_store: Any) -> dict[int, list[str]]:
    """Version id -> the live readers holding it (``"host H pid P"``) of the store whose zarr store is
    ``root_store`` ({} off object storage): the holds whose object was written less than its
    ``lease_seconds`` ago (the server's clock); lapsed holds are deleted on the way.  A hold that
    cannot be read is taken as live for this process's lease (:func:`~.lease.lease_seconds`) after
    its object was written."""
    if store_url(root_store) is None:
        return {}
    inner = root_store.store
    obstore = _obstore()
    out: dict[int, list[str]] = {}
    now = time.time()
    for batch in obstore.list(inner, prefix=HOLDS_PREFIX):
        for meta in batch:
            key = meta["path"]
            name = key.rsplit("/", 1)[-1]
            try:
                vid = int(name[1:].split("-", 1)[0])
            except ValueError:
                continue
            renewed = [meta.get("last_modified")]
            try:
                got = obstore.get(inner, key)
                renewed.append(got.meta.get("last_modified"))  # (renewed since the listing, maybe)
                info = json.loads(bytes(got.bytes()))
                ttl = float(info["lease_seconds"])
                if not 0 < ttl < float("inf"):
                    raise ValueError(f"lease_seconds {ttl!r}")
                who = f"host {info.get('host', '?')} pid {info.get('pid', '?')}"
            except FileNotFoundError:
                continue  # released meanwhile
            except Exception:  # noqa: BLE001 - unreadable: its object's age decides, with our lease
                ttl, who = lease_seconds(), "an unreadable hold"
            stamps = [t.timestamp() for t in renewed if t is not None]
            # the server's time of the last renewal (its times may be rounded down to the second)
            if (max(stamps) if stamps else now) + ttl + _ROUNDING_SECONDS > now:
                out.setdefault(vid, []).append(who)
            else:
                try:
                    obstore.delete(inner, key)
                except Exception:  # noqa: BLE001 - the next gc tries again
                    pass
    return out
