"""Writes a paused writer cannot land: zarr's ``ObjectStore`` whose every write is conditional.

The lease (:mod:`.lease`) lets one writer at a time commit, and its check before each commit stops a
writer that *knows* it lost the lease.  It cannot stop a write already under way when the process
was paused (SIGSTOP, a frozen VM, a long GC) past its lease: the process goes on where it stopped,
after the next writer took over.  Object stores check one thing at the server, for one object: a PUT
conditional on the object's ETag (``If-Match``) or on its absence (``If-None-Match: *``).  So:

* **Every PUT of a writer holding a lease is conditional** on what this writer knows of the object:
  the ETag its own last PUT of it returned, the ETag a read returned, or that it is absent.  A read
  counts only once a lease check (or renewal) *begun after the read* succeeded (:meth:`Fence.vouch`):
  a paused writer that reads its successor's object after it goes on fails that check before it
  writes.  An object it knows nothing of is created only if absent (a node's ``zarr.json`` — a new
  array — only after a lease check begun then, as for a delete).  When a PUT's condition fails,
  the object is looked at again (HEAD), the lease checked, and the PUT retried on the new ETag: the
  writer that holds the lease writes over whatever is there, a paused one stops at the check
  (:class:`~replaybuf_core.errors.StoreLockedError`).  Deletes (a shrinking resize, an array's
  removal) have no condition on S3 through obstore: each is preceded by a lease check.
* **The writer that takes over a lapsed or broken lease stamps the store first**
  (:func:`stamp_metadata`): it rewrites every ``zarr.json`` (the groups', every array's) with its own
  token in the attribute :data:`FENCE_ATTR` (read-modify-write, each conditional on what it read).
  Every later PUT of the paused writer to a ``zarr.json`` — a shape, ``episode_ends``' length, the
  commit record — then fails at the server, so it can make nothing visible; its chunk writes land
  only on objects the successor has not written since (rows past the successor's committed ones,
  which it rewrites before it commits them).  zarr keeps attributes when it rewrites a
  ``zarr.json``, so the token stays.

What stays outside (README, "Paused writers"): a paused writer's DELETE or new ``zarr.json`` sent
between its check and the request (only shrinking writes delete: drops, edits, trims after an error —
never an append; only array creation creates a ``zarr.json``); an object whose bytes the successor
made identical again to what the paused writer knew (an ETag is the content's digest: a ``zarr.json``
it deleted and recreated, a chunk), where the paused writer's PUT lands.

Cost: nothing in the steady state of appends — a chunk rewritten (the partial last chunk) carries the
ETag of this writer's own last PUT of it; a read of an object this writer wrote and that still holds
what it wrote needs no check.  The first write of an object known only from a read (``zarr.json``
read at open) waits for the next lease check, which the buffer makes before each commit anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from zarr.storage import ObjectStore

logger = logging.getLogger(__name__)

__all__ = ["FencedObjectStore", "Fence", "FENCE_ATTR", "stamp_metadata"]

#: attribute of every ``zarr.json`` a writer taking over a lease rewrote: ``{"token", "since"}``
FENCE_ATTR = "replaybuf_writer"
#: objects whose ETag a writable open remembers (least recently used forgotten first: a forgotten
#: one is looked at again before it is written)
MAX_KNOWN = 65536
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


class Fence:
    """What one writable open knows of the objects it wrote or read — key → ``(ETag or None for
    absent, seq)``, ``seq`` None for what its own PUT left, else the lease's :attr:`~.lease.Lease.seq`
    when it was read — and the lease (:class:`~.lease.Lease`) that vouches for the reads."""

    def __init__(self) -> None:
        self.lease: Any = None
        self._known: OrderedDict[str, tuple[str | None, int | None]] = OrderedDict()
        self._mutex = threading.Lock()
        self._checking = threading.Lock()  # one check at a time; the others find it done

    def attach(self, lease: Any) -> None:
        """From now on writes are conditional and vouched for by ``lease``; what was read before
        counts as read now (a check begun later vouches for it)."""
        with self._mutex:
            self.lease = lease
            now = lease.seq
            for key, (tag, seq) in list(self._known.items()):
                if seq is not None:
                    self._known[key] = (tag, now)

    @property
    def active(self) -> bool:
        """True while a lease is attached and not given back (a store used after its buffer closed
        writes as zarr's ``ObjectStore`` does, as before it held the lease)."""
        return self.lease is not None and not self.lease.released

    def _seq(self) -> int:
        return self.lease.seq if self.lease is not None else 0

    def note_read(self, key: str, tag: str | None) -> None:
        """``key`` was read (or found absent: ``tag`` None) just now."""
        with self._mutex:
            old = self._known.get(key)
            if old is not None and old[1] is None and tag is not None and old[0] == tag:
                return  # it still holds what this writer wrote
            self._put(key, (tag, self._seq()))

    def note_written(self, key: str, tag: str | None) -> None:
        """This writer's PUT left ``key`` with ETag ``tag`` (or its DELETE removed it: None)."""
        with self._mutex:
            self._put(key, (tag, None) if self.active else (tag, self._seq()))

    def _put(self, key: str, value: tuple[str | None, int | None]) -> None:
        self._known[key] = value
        self._known.move_to_end(key)
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)

    def known(self, key: str) -> tuple[str | None, int | None] | None:
        with self._mutex:
            return self._known.get(key)

    def vouch(self, seq: int) -> None:
        """Return once a lease check or renewal numbered above ``seq`` succeeded (making one now if
        none did).  Raises StoreLockedError when the lease is lost."""
        lease = self.lease
        if lease.vouched > seq:
            return
        with self._checking:
            if lease.vouched <= seq:
                lease.check()


def _e_tag(result: Any) -> str | None:
    return result.get("e_tag") if isinstance(result, dict) else None


class FencedObjectStore(ObjectStore):
    """zarr's ``ObjectStore`` for a writable open: once a lease is attached (:func:`~.lease.take_lease`)
    every PUT is conditional and every DELETE follows a lease check (module docstring).  Before
    that it writes as ``ObjectStore`` does and only remembers ETags.  Pickled (Dask), it arrives
    without the lease: another process holds none of this one's knowledge."""

    def __init__(self, store: Any, *, read_only: bool = False, fence: Fence | None = None) -> None:
        super().__init__(store, read_only=read_only)
        self.fence = fence if fence is not None else Fence()

    def with_read_only(self, read_only: bool = False) -> FencedObjectStore:
        out = type(self)(self.store, read_only=read_only, fence=self.fence)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k.startswith("replaybuf_")})
        return out

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state.pop("fence", None)
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self.fence = Fence()

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if byte_range is not None or self.read_only:
            return await super().get(key, prototype, byte_range)
        import obstore as obs

        try:
            resp = await obs.get_async(self.store, key)
            data = await resp.bytes_async()
        except _MISSING:
            self.fence.note_read(key, None)
            return None
        self.fence.note_read(key, resp.meta.get("e_tag"))
        return prototype.buffer.from_bytes(data)

    async def _look(self, key: str) -> None:
        import obstore as obs

        try:
            meta = await obs.head_async(self.store, key)
        except _MISSING:
            self.fence.note_read(key, None)
        else:
            self.fence.note_read(key, meta.get("e_tag"))

    async def exists(self, key: str) -> bool:
        await self._look(key)
        known = self.fence.known(key)
        return known is not None and known[0] is not None

    async def set(self, key: str, value: Any) -> None:
        import obstore as obs

        self._check_writable()
        data = value.as_buffer_like()
        fence = self.fence
        if not fence.active:
            fence.note_written(key, _e_tag(await obs.put_async(self.store, key, data)))
            return
        fence.lease.raise_if_lost()
        for _ in range(8):
            known = fence.known(key)
            if known is None or known[0] is None:
                mode: Any = "create"
                if key.endswith("zarr.json"):  # a new node (array) appears in listings: the lease checked now
                    await asyncio.to_thread(fence.vouch, fence.lease.seq)
            else:
                if known[1] is not None:  # known from a read: only once the lease was checked after it
                    await asyncio.to_thread(fence.vouch, known[1])
                mode = {"e_tag": known[0]}
            try:
                res = await obs.put_async(self.store, key, data, mode=mode)
            except (obs.exceptions.PreconditionError, obs.exceptions.AlreadyExistsError, *_MISSING) as exc:
                logger.debug("%s: the server refused the write (%s): the object is not what this writer knew",
                             key, type(exc).__name__)
                await self._look(key)  # look again; the next round checks the lease before writing over it
                continue
            fence.note_written(key, _e_tag(res))
            return
        raise RuntimeError(f"{key}: the object changed under this writer at each of 8 attempts (another writer "
                           "of this process writing it at the same time?)")

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        import obstore as obs

        self._check_writable()
        if self.fence.active:
            self.fence.lease.raise_if_lost()
        try:
            res = await obs.put_async(self.store, key, value.as_buffer_like(), mode="create")
        except obs.exceptions.AlreadyExistsError:
            return
        self.fence.note_written(key, _e_tag(res))

    async def delete(self, key: str) -> None:
        self._check_writable()
        fence = self.fence
        if fence.active:  # no condition on a DELETE: the lease checked now
            await asyncio.to_thread(fence.vouch, fence.lease.seq)
        await super().delete(key)
        fence.note_written(key, None)


def metadata_keys(store: FencedObjectStore, path: str) -> list[str]:
    """The ``zarr.json`` objects of the replay-buffer group at ``path`` of ``store``: its own, its
    ``data`` and ``meta`` groups' and their arrays'."""
    import obstore as obs

    base = f"{path}/" if path else ""
    keys = [f"{base}zarr.json"]
    for group in ("data", "meta"):
        keys.append(f"{base}{group}/zarr.json")
        listing = obs.list_with_delimiter(store.store, prefix=f"{base}{group}")
        keys.extend(f"{p.rstrip('/')}/zarr.json" for p in listing["common_prefixes"])
    return keys


def stamp_metadata(store: FencedObjectStore, path: str, token: str) -> int:
    """Rewrite every ``zarr.json`` of the group at ``path`` (:func:`metadata_keys`) with
    ``{"token": token, "since": <UTC time>}`` in the attribute :data:`FENCE_ATTR`, each PUT
    conditional on the ETag read (read again when another write came between).  The store's fence
    must hold the lease (:func:`~.lease.take_lease`).  Returns how many were rewritten (zarr v2
    documents are not).

    Raises:
        StoreLockedError: the lease was lost meanwhile.
    """
    import obstore as obs

    from .zarr_compat import sync

    fence = store.fence
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    async def one(key: str) -> int:
        for _ in range(8):
            try:
                resp = await obs.get_async(store.store, key)
                raw = bytes(await resp.bytes_async())
            except _MISSING:
                return 0
            seq, tag = fence.lease.seq, resp.meta.get("e_tag")
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or not tag:
                return 0
            doc.setdefault("attributes", {})[FENCE_ATTR] = {"token": token, "since": since}
            await asyncio.to_thread(fence.vouch, seq)
            try:
                res = await obs.put_async(store.store, key, json.dumps(doc, indent=2).encode(), mode={"e_tag": tag})
            except (obs.exceptions.PreconditionError, *_MISSING):
                continue  # written meanwhile (by the writer this one replaced): read it again
            fence.note_written(key, _e_tag(res))
            return 1
        raise RuntimeError(f"{key}: changed at each of 8 attempts to stamp it")

    keys = metadata_keys(store, path)

    async def run() -> int:
        return sum(await asyncio.gather(*[one(k) for k in keys]))

    return sync(run())
