"""The writer's lease on object storage: one writer per store, an expiry renewed by a heartbeat, and a
fence before every commit.

Object stores have no file locks and no rename, but they have conditional PUTs: create-only
(``If-None-Match: *``) and compare-and-swap on the object's ETag (``If-Match``; S3 since 2024-11, GCS
and Azure through their generation / ETag preconditions — obstore's ``mode="create"`` and
``mode={"e_tag": ...}``).  The lease is built the way lock services built on such primitives are
(leases: Gray & Cheriton, SOSP 1989; fencing: Kleppmann, "How to do distributed locking", 2016):

* **Taking it.** A writable open creates ``<prefix>/.replaybuf.lease`` — a random token, host, pid,
  creation time and ``expires_unix`` — with a create-only PUT.  If the object exists and has not
  expired, the open fails (:class:`~replaybuf_core.errors.StoreLockedError`) naming the holder and
  when its lease lapses.  An expired lease is taken over with a PUT conditional on the ETag read, so
  of two writers taking over the same dead lease exactly one wins.  A lease written without an expiry
  (by replaybuf before leases expired) never lapses by itself: ``replaybuf unlock``.
* **Keeping it.** While the lease is held, a daemon thread renews it every third of its duration
  (:data:`LEASE_SECONDS`, default 60 s; ``REPLAYBUF_LEASE_SECONDS`` in the environment) with a PUT
  conditional on the ETag of its own last write.  A writer that dies (SIGKILL included) stops
  renewing, and its lease lapses by itself at most :data:`LEASE_SECONDS` later — no manual step.
* **The fence.** Before every commit (each append's ``meta/episode_ends`` write, each edit, drop or
  write through ``rb[key]``) the buffer calls :meth:`Lease.check`: the lease must still carry the
  ETag of our last renewal (a HEAD) and our last successful renewal must be younger than the lease's
  duration less a margin (:data:`SAFETY_SECONDS`).  A writer whose lease was broken (``unlock
  --force``), taken over after it expired (a process paused past its lease), or could not be renewed
  (the endpoint unreachable) fails its next commit with ``StoreLockedError`` instead of writing beside
  another writer.  What remains is the moment between that check and the commit's PUT: another
  writer can enter it only through a forced break, since an expiry is not seen before the renewal
  deadline the check enforces (clocks on the two hosts assumed to agree within the margin).
* **Giving it back.** Closing the buffer stops the heartbeat and deletes the lease if it still holds
  our token.  Within one process, writable opens of one URL share the lease (reference counted), as
  the local writer lock does.

A PUT whose reply was lost (an error other than "already exists") is settled by reading the lease
back: our token means we hold it, so a lost reply to a successful PUT never looks like a foreign writer.
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
from replaybuf_core.locking import process_running

from .object_store import _obstore, describe_failure, open_object_store, store_url

__all__ = ["Lease", "acquire_lease", "break_lease", "release_all_leases", "lease_seconds", "LEASE_NAME",
           "LEASE_SECONDS", "SAFETY_SECONDS"]

LEASE_NAME = ".replaybuf.lease"
#: how long a lease lasts without a renewal (seconds); ``REPLAYBUF_LEASE_SECONDS`` overrides it
LEASE_SECONDS = 60.0
#: a commit needs a renewal younger than the lease's duration less this (seconds, at most a third of it)
SAFETY_SECONDS = 5.0
logger = logging.getLogger(__name__)
_held: dict[str, list] = {}  # url -> [lease, count]
_held_lock = threading.Lock()


def lease_seconds() -> float:
    """The duration of new leases: ``REPLAYBUF_LEASE_SECONDS`` if set (a positive number), else
    :data:`LEASE_SECONDS`.  Raises ValueError for a value that is not a positive number."""
    raw = os.environ.get("REPLAYBUF_LEASE_SECONDS")
    if raw is None:
        return float(LEASE_SECONDS)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"REPLAYBUF_LEASE_SECONDS={raw!r}: a lease lasts a positive number of seconds")
    return value


def _e_tag(result: Any) -> str | None:
    """The ETag of a PUT's result or a GET/HEAD's metadata (obstore gives dicts)."""
    if isinstance(result, dict):
        return result.get("e_tag")
    meta = getattr(result, "meta", None)
    return meta.get("e_tag") if isinstance(meta, dict) else getattr(result, "e_tag", None)


def _body(token: str, created: float, ttl: float, now: float) -> bytes:
    return json.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(),
                       "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
                       "created_unix": created, "renewed_unix": now, "lease_seconds": ttl,
                       "expires_unix": now + ttl}).encode()


class Lease:
    """A held writer lease (see the module docstring): renewed in the background until
    :meth:`release`; :meth:`check` is the fence a commit passes first."""

    def __init__(self, url: str, store: Any, token: str, e_tag: str | None, created: float, ttl: float,
                 renewed_at: float):
        self.url, self._store, self.token = url, store, token
        self._e_tag, self._created, self.ttl = e_tag, created, float(ttl)
        self._renewed_at = renewed_at  # time.monotonic() just before the last successful PUT
        self._lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat, name=f"replaybuf-lease {url}", daemon=True)
        self._thread.start()

    @property
    def path(self) -> str:
        return f"{self.url}/{LEASE_NAME}"

    def _margin(self) -> float:
        return min(SAFETY_SECONDS, self.ttl / 3)

    def renew(self) -> bool:
        """Renew the lease now (a PUT conditional on our last ETag); True when renewed.  A lease found
        changed or gone is marked lost (:meth:`check` raises from then on); a failed request leaves
        the lease as it was (the next heartbeat tries again)."""
        obstore = _obstore()
        with self._mutex:
            if self._lost is not None:
                return False
            t = time.monotonic()
            body = _body(self.token, self._created, self.ttl, time.time())
            try:
                res = (obstore.put(self._store, LEASE_NAME, body, mode={"e_tag": self._e_tag})
                       if self._e_tag else obstore.put(self._store, LEASE_NAME, body))
            except (obstore.exceptions.PreconditionError, FileNotFoundError) as exc:
                self._lost = (f"the lease {self.path} was changed or removed by someone else "
                              f"({type(exc).__name__}): broken (replaybuf unlock --force) or taken over after "
                              "it expired")
                return False
            except Exception as exc:  # noqa: BLE001 - the endpoint may come back before the lease runs out
                logger.warning("%s: could not renew the writer lease (%s); retrying", self.url, type(exc).__name__)
                return False
            self._e_tag, self._renewed_at = _e_tag(res), t
            return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            self.renew()

    def check(self) -> None:
        """The fence: raise unless this writer may commit now.

        Raises:
            StoreLockedError: the lease was broken or taken over (its object no longer carries our
                last ETag), or no renewal succeeded for longer than its duration less the margin
                (the lease may have lapsed and been taken).  Nothing is written after it.
        """
        with self._mutex:  # no renewal between the HEAD and the comparison with our ETag
            age = time.monotonic() - self._renewed_at
            if self._lost is None and age > self.ttl - self._margin():
                self._lost = (f"the lease {self.path} was last renewed {age:.1f} s ago; it lasts {self.ttl:.0f} s, "
                              "so another writer may hold the store now (this process was paused, or the endpoint "
                              "was unreachable)")
            if self._lost is None:
                try:
                    meta = _obstore().head(self._store, LEASE_NAME)
                except FileNotFoundError:
                    meta = None
                if meta is None or (self._e_tag is not None and _e_tag(meta) != self._e_tag):
                    self._lost = (f"the lease {self.path} is no longer this writer's (broken with replaybuf "
                                  "unlock --force, or taken over after it expired)")
        if self._lost is not None:
            raise StoreLockedError(f"{self.url}: this writer lost its lease, so nothing more is committed: "
                                   f"{self._lost}. Reopen the store to go on writing (what was committed before "
                                   "stays).")

    def release(self) -> None:
        """Drop one reference; the last stops the heartbeat and deletes the lease object when it still
        holds our token."""
        with _held_lock:
            entry = _held.get(self.url)
            if entry is None or entry[0] is not self:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _held[self.url]
        self._stop.set()
        obstore = _obstore()
        try:
            if _read(self._store, obstore)[0].get("token") == self.token:
                obstore.delete(self._store, LEASE_NAME)
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - e.g. the endpoint is gone: the lease stays (and lapses), named
            logger.warning("%s: could not delete the writer lease (%s: %s); it lapses by itself within %.0f s",
                           self.url, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", self.ttl)


def release_all_leases() -> None:
    """Release every lease this process holds, whatever the open buffers (a test session ending
    before its server stops; buffers left open release theirs when collected otherwise)."""
    with _held_lock:
        leases = [entry[0] for entry in _held.values()]
    for lease in leases:
        while lease.url in _held:
            lease.release()


def _read(store: Any, obstore) -> tuple[dict, str | None]:
    """The lease's contents (a dict; ``{"token": None}`` when unreadable) and its ETag."""
    got = obstore.get(store, LEASE_NAME)
    raw = bytes(got.bytes())
    try:
        out = json.loads(raw)
    except ValueError:
        out = {"token": None, "note": f"unreadable lease ({len(raw)} bytes)"}
    return (out if isinstance(out, dict) else {"token": None}), _e_tag(got)


def _expires_in(info: dict) -> float | None:
    """Seconds until the lease lapses (negative: lapsed), None for a lease without an expiry."""
    try:
        return float(info["expires_unix"]) - time.time()
    except (KeyError, TypeError, ValueError):
        return None


def _holder(info: dict, lapse: bool = True) -> str:
    """Who holds the lease ``info`` (host, pid, age) and, with ``lapse``, when it lapses."""
    age = time.time() - float(info.get("created_unix", time.time()))
    left = _expires_in(info)
    when = ("" if not lapse else "; it never lapses by itself (written without an expiry)" if left is None else
            f"; it lapsed {-left:.0f} s ago" if left < 0 else f"; it lapses in {left:.0f} s unless renewed")
    return (f"host {info.get('host', '?')} pid {info.get('pid', '?')}, created {info.get('created', '?')} "
            f"({age:.0f} s ago){when}")


def acquire_lease(store: Any) -> Lease:
    """Take the writer lease of ``store`` (an :func:`~replaybuf_zarr.object_store.open_object_store`
    store), or take over an expired one; its heartbeat starts.

    Raises:
        StoreLockedError: another writer holds an unexpired lease (named with its host, pid, age and
            when it lapses), or took over the expired one first.
        ValueError: a bad ``REPLAYBUF_LEASE_SECONDS``.
    """
    url = store_url(store)
    with _held_lock:
        entry = _held.get(url)
        if entry is not None:
            entry[1] += 1
            return entry[0]
    ttl = lease_seconds()
    obstore = _obstore()
    inner = store.store
    token = uuid.uuid4().hex
    created = time.time()
    t = time.monotonic()
    body = _body(token, created, ttl, created)
    try:
        res = obstore.put(inner, LEASE_NAME, body, mode="create")
    except obstore.exceptions.AlreadyExistsError:
        res = _take_over_expired(url, inner, obstore, body)
    except Exception as exc:
        # the reply may have been lost after the PUT succeeded: our token in the lease settles it
        try:
            info, tag = _read(inner, obstore)
            ours = info.get("token") == token
        except Exception:  # noqa: BLE001 - no lease (or none readable): the PUT failed
            ours = False
        if not ours:
            raise exc
        res = {"e_tag": tag}
    lease = Lease(url, inner, token, _e_tag(res), created, ttl, t)
    with _held_lock:
        _held[url] = [lease, 1]
    return lease


def _take_over_expired(url: str, inner: Any, obstore, body: bytes) -> Any:
    """Replace an expired lease (a PUT conditional on the ETag read); StoreLockedError otherwise."""
    try:
        info, tag = _read(inner, obstore)
    except FileNotFoundError:  # released meanwhile: create it again (a race with another taker is refused)
        info, tag = {}, None
    left = _expires_in(info)
    if tag is None and not info:
        try:
            return obstore.put(inner, LEASE_NAME, body, mode="create")
        except obstore.exceptions.AlreadyExistsError:
            pass
    elif left is not None and left < 0 and tag:
        try:
            res = obstore.put(inner, LEASE_NAME, body, mode={"e_tag": tag})
        except (obstore.exceptions.PreconditionError, FileNotFoundError):
            pass  # another writer took it over first
        else:
            logger.warning("%s: took over an expired writer lease (%s)", url, _holder(info))
            return res
    try:
        info = _read(inner, obstore)[0]
    except FileNotFoundError:
        info = {}
    dead_here = _dead_here(info)
    here = "" if info.get("host") != socket.gethostname() else (" (not running: dead)" if dead_here else " (running)")
    left = _expires_in(info)
    way = (f"its holder is dead: break it with `replaybuf unlock {url}`" if dead_here else
           f"a lease without an expiry never lapses: if its writer is gone, `replaybuf unlock {url}`" if left is None
           else f"a dead writer's lease lapses by itself; to take the store from a live writer: `replaybuf unlock "
                f"{url} --force` (that writer then fails its next commit)")
    raise StoreLockedError(f"{url} is being written by another writer: its lease {url}/{LEASE_NAME} is held by "
                           f"{_holder(info)}{here}; {way}") from None


def _dead_here(info: dict) -> bool:
    """True when the lease's holder is a process of this host that is no longer running."""
    return info.get("host") == socket.gethostname() and not _alive_here(info)


def _alive_here(info: dict) -> bool:
    """True when the lease's holder is a running process of this host (a killed process its parent
    has not reaped yet — a zombie — is not running: it will never renew or commit again)."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    return process_running(info["pid"])


def break_lease(url: str, storage_options: dict | None = None, force: bool = False) -> str | None:
    """Delete the lease of the store at ``url``; returns who held it (None: no lease).  Without
    ``force`` only a lease that cannot belong to a live writer is broken: one that has lapsed, or
    whose holder is a process of this host that is no longer running.  A live writer whose lease is
    broken with ``force`` fails its next commit (the fence), it does not write beside the next one.

    Raises:
        StoreLockedError: the lease has not lapsed and its holder is not known dead, and ``force``
            is False (the message names the holder and when the lease lapses).
        OSError: the object store cannot be reached or read (endpoint, credentials, bucket; named).
    """
    obstore = _obstore()
    store = open_object_store(url, read_only=False, storage_options=storage_options)
    try:
        info = _read(store.store, obstore)[0]
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - obstore's errors (endpoint, credentials, bucket): named with the URL
        raise describe_failure(url, store, exc) from exc
    left = _expires_in(info)
    dead_here = _dead_here(info)
    if not force and not dead_here and not (left is not None and left < 0):
        why = ("a process of this host that is still running" if _alive_here(info) else
               "a writer on another host, which cannot be checked from here" if info.get("host") != socket.gethostname()
               else "a writer that may still be running")
        raise StoreLockedError(f"{url}: the lease is held by {_holder(info)} — {why}. Stop that writer, wait for "
                               "its lease to lapse, or break it with --force (force=True in Python); a live writer "
                               "then fails its next commit")
    try:
        obstore.delete(store.store, LEASE_NAME)
    except Exception as exc:  # noqa: BLE001
        raise describe_failure(url, store, exc) from exc
    return _holder(info, lapse=False)
