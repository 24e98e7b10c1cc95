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
  another writer.  What it had under way when it was paused is the next point's job.
* **Writes a paused writer had in flight.** A check before a write cannot stop a write already
  under way when the process was paused (SIGSTOP, a VM frozen) past its lease.  So every write of a
  writer holding a lease is itself conditional (:mod:`.fenced_store`): a PUT carries the ETag of the
  object as this writer last wrote or read it (read: only after a check younger than the read), and
  the writer that takes over a lapsed or broken lease first rewrites every ``zarr.json`` with its own
  token (:func:`~replaybuf_zarr.fenced_store.stamp_metadata`): what the paused writer sends later
  fails at the server.  A broken lease is left as a *tombstone* (``"broken": true``, lapsed) so that
  the next writer knows to do so.  Checks and renewals are counted (:attr:`Lease.vouched`) to tell
  a read made before a check from one made after it.
* **Giving it back.** Closing the buffer stops the heartbeat and deletes the lease if it still holds
  our token (a tombstone instead while the store is not yet fenced against a writer it replaced).
  Within one process, writable opens of one URL share the lease (reference counted), as the local
  writer lock does.

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

__all__ = ["Lease", "acquire_lease", "take_lease", "break_lease", "release_all_leases", "lease_seconds",
           "LEASE_NAME", "LEASE_SECONDS", "SAFETY_SECONDS"]

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


def _tombstone(why: str) -> bytes:
    """A broken lease: lapsed (any writer takes it over) and marked, so that the writer taking it
    over fences the store against the one that held it (module docstring)."""
    now = time.time()
    return json.dumps({"token": None, "broken": True, "why": why, "host": socket.gethostname(),
                       "pid": os.getpid(), "created_unix": now,
                       "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "expires_unix": 0}).encode()


class Lease:
    """A held writer lease (see the module docstring): renewed in the background until
    :meth:`release`; :meth:`check` is the fence a commit passes first."""

    def __init__(self, url: str, store: Any, token: str, e_tag: str | None, created: float, ttl: float,
                 renewed_at: float):
        self.url, self._store, self.token = url, store, token
        self._e_tag, self._created, self.ttl = e_tag, created, float(ttl)
        self._renewed_at = renewed_at  # time.monotonic() just before the last successful PUT
        self._lost: str | None = None
        self._seq = 0  # checks and renewals begun (each numbered when it begins)
        self._vouched = 0  # the number of the latest one that succeeded
        #: True while another writer may still be paused with writes in flight (this lease replaced
        #: a lapsed or broken one) and the store's metadata is not stamped yet (``fenced_store``)
        self.stale_writer_possible = False
        self.released = False  #: True once the last reference let go (the stores it fenced write unfenced again)
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
            self._seq += 1
            seq = self._seq
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
            self._e_tag, self._renewed_at, self._vouched = _e_tag(res), t, seq
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
            self._seq += 1
            seq = self._seq
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
            if self._lost is None:
                self._vouched = seq
        if self._lost is not None:
            raise StoreLockedError(f"{self.url}: this writer lost its lease, so nothing more is committed: "
                                   f"{self._lost}. Reopen the store to go on writing (what was committed before "
                                   "stays).")

    @property
    def seq(self) -> int:
        """How many checks and renewals have begun: a read taken when this was ``n`` is vouched for
        by a check or renewal numbered above ``n`` that succeeded (:attr:`vouched`)."""
        return self._seq

    @property
    def vouched(self) -> int:
        """The number (:attr:`seq`) of the latest check or renewal that succeeded."""
        return self._vouched

    def raise_if_lost(self) -> None:
        """StoreLockedError at once when the lease is known lost (no request)."""
        if self._lost is not None:
            self.check()

    def release(self) -> None:
        """Drop one reference; the last stops the heartbeat and deletes the lease object when it still
        holds our token — or, when a writer it replaced may still be paused and the store is not
        fenced against it yet (:attr:`stale_writer_possible`), leaves a tombstone in its place, so the
        next writer fences it."""
        with _held_lock:
            entry = _held.get(self.url)
            if entry is None or entry[0] is not self:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _held[self.url]
        self.released = True
        self._stop.set()
        obstore = _obstore()
        try:
            info, tag = _read(self._store, obstore)
            if info.get("token") == self.token:
                if self.stale_writer_possible and tag:
                    obstore.put(self._store, LEASE_NAME, _tombstone(f"released unfenced by pid {os.getpid()}"),
                                mode={"e_tag": tag})
                else:
                    obstore.delete(self._store, LEASE_NAME)
        except (FileNotFoundError, obstore.exceptions.PreconditionError):
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
    replaced = False
    try:
        res = obstore.put(inner, LEASE_NAME, body, mode="create")
    except obstore.exceptions.AlreadyExistsError:
        res, replaced = _take_over_expired(url, inner, obstore, body)
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
    lease.stale_writer_possible = replaced  # its writer may be paused, not dead: fence it (fenced_store)
    with _held_lock:
        _held[url] = [lease, 1]
    return lease


def _take_over_expired(url: str, inner: Any, obstore, body: bytes) -> tuple[Any, bool]:
    """Replace an expired lease or a tombstone (a PUT conditional on the ETag read): ``(the PUT's
    result, True)``, or ``(result, False)`` when the lease was released meanwhile; StoreLockedError
    otherwise."""
    try:
        info, tag = _read(inner, obstore)
    except FileNotFoundError:  # released meanwhile: create it again (a race with another taker is refused)
        info, tag = {}, None
    left = _expires_in(info)
    if tag is None and not info:
        try:
            return obstore.put(inner, LEASE_NAME, body, mode="create"), False
        except obstore.exceptions.AlreadyExistsError:
            pass
    elif left is not None and left < 0 and tag:
        try:
            res = obstore.put(inner, LEASE_NAME, body, mode={"e_tag": tag})
        except (obstore.exceptions.PreconditionError, FileNotFoundError):
            pass  # another writer took it over first
        else:
            if info.get("broken"):
                logger.info("%s: took the writer lease broken by host %s pid %s (%s)", url, info.get("host"),
                            info.get("pid"), info.get("why"))
            else:
                logger.warning("%s: took over an expired writer lease (%s)", url, _holder(info))
            return res, True
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
    """Break the lease of the store at ``url``: replace it with a lapsed tombstone (``"broken":
    true``), which the next writer takes over and then fences the store against the writer that held
    it (module docstring); returns who held it (None: no lease, or one already broken).  Without
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
        info, tag = _read(store.store, obstore)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - obstore's errors (endpoint, credentials, bucket): named with the URL
        raise describe_failure(url, store, exc) from exc
    if info.get("broken"):
        return None
    left = _expires_in(info)
    dead_here = _dead_here(info)
    if not force and not dead_here and not (left is not None and left < 0):
        why = ("a process of this host that is still running" if _alive_here(info) else
               "a writer on another host, which cannot be checked from here" if info.get("host") != socket.gethostname()
               else "a writer that may still be running")
        raise StoreLockedError(f"{url}: the lease is held by {_holder(info)} — {why}. Stop that writer, wait for "
                               "its lease to lapse, or break it with --force (force=True in Python); a live writer "
                               "then fails its next commit")
    why = f"broken{' with force' if force else ''} by host {socket.gethostname()} pid {os.getpid()}"
    try:
        obstore.put(store.store, LEASE_NAME, _tombstone(why), **({"mode": {"e_tag": tag}} if tag else {}))
    except (obstore.exceptions.PreconditionError, FileNotFoundError):
        raise StoreLockedError(f"{url}: the lease changed while it was being broken (renewed, released or taken "
                               "over); look again: replaybuf unlock") from None
    except Exception as exc:  # noqa: BLE001
        raise describe_failure(url, store, exc) from exc
    return _holder(info, lapse=False)


def take_lease(root: Any) -> tuple[Any, bool]:
    """Take the writer lease of the zarr group ``root`` (on a
    :class:`~.fenced_store.FencedObjectStore`) and attach it to the store's fence; when the lease
    replaced a lapsed or broken one, stamp the metadata first
    (:func:`~.fenced_store.stamp_metadata`).  Returns ``(lease, stamped)``: after a stamp the caller
    must read every node's metadata again (zarr's in-memory copies lack the token).

    Raises:
        StoreLockedError: another writer holds the lease, or lost it meanwhile.
    """
    from .fenced_store import stamp_metadata

    store = root.store
    lease = acquire_lease(store)
    fence = getattr(store, "fence", None)
    if fence is None:
        return lease, False
    try:
        fence.attach(lease)
        if not lease.stale_writer_possible:
            return lease, False
        stamp_metadata(store, root.path, lease.token)
        lease.stale_writer_possible = False
    except BaseException:
        lease.release()
        raise
    return lease, True
