"""The process-wide pool of open chunk/shard files behind the fast chunk reader.

One descriptor per stored object ever read would run out under the common ``ulimit -n 1024`` (a
5,000-episode store has 15,000 chunk files); closing a descriptor another thread still reads through
would let the next ``open`` reuse its number, and that read would see another file.  So the pool
keeps at most :data:`MAX_OPEN_FILES` open (least recently used closed first) and closes a
descriptor only once no read uses it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict


def _max_open_files() -> int:
    """Open descriptors the pool keeps: well under the soft ``RLIMIT_NOFILE`` (1024 on many
    systems), so sampling or verifying a store of thousands of chunk files never runs out."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft <= 0:
            soft = 1 << 16
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        soft = 1024
    return max(8, min(512, soft // 4))


#: at most this many chunk/shard files are kept open by all readers of this process together (the
#: least recently used ones are closed; files in use by a read stay open until it is done)
MAX_OPEN_FILES = _max_open_files()


class _FileHandle:
    """An open descriptor of one version of one stored object.  ``users``: reads under way through
    it; ``retired``: dropped from the pool (evicted, replaced, released) — closed once no read uses
    it, and never used for a new read (:meth:`_FilePool.acquire` says False)."""

    __slots__ = ("fd", "users", "retired")

    def __init__(self, fd: int):
        self.fd = fd
        self.users = 0
        self.retired = False


class _FilePool:
    """The LRU of open chunk/shard files (``os.pread`` needs no seek, so one descriptor
    serves every thread).  Entries are keyed ``(owner, path)``: each reader (a :class:`~replaybuf_zarr.fetcher.Fetcher`)
    sees the files as they were when it first read them, and a reader made later opens them anew
    (another process may have replaced them).  At most :data:`MAX_OPEN_FILES` are kept over all
    owners.  A descriptor is closed only when no read uses it (a closed number is reused by the
    next ``open``, and a read through it would see another file).  After a fork the child starts an
    empty pool."""

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[int, str], _FileHandle] = OrderedDict()
        self._versions: dict[str, int] = {}  # per path: how many times it was forgotten (replaced)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        #: owners gone without a lock taken (a reader's finalizer): their files are retired by the next
        #: call that takes the lock.  A finalizer runs wherever the garbage collector does — possibly
        #: inside this pool's lock, in this very thread — so it must not take the lock (it hung for ever)
        self._gone: list[int] = []

    def _check_fork(self) -> None:  # under the lock; also retires the files of owners gone meanwhile
        if self._pid != os.getpid():  # the parent's descriptors are not ours to close
            self._open, self._pid = OrderedDict(), os.getpid()
        while self._gone:
            owner = self._gone.pop()
            for key in [k for k in self._open if k[0] == owner]:
                self._retire(self._open.pop(key))

    def release_later(self, owner: int) -> None:
        """:meth:`release_all` of ``owner`` without taking the lock: safe in a finalizer (``__del__``),
        which may run while this thread holds the lock.  Done by the next call that takes it."""
        self._gone.append(owner)

    def open(self, owner: int, path: str) -> _FileHandle | None:
        """``owner``'s file at ``path`` (opened now if needed), *acquired* for one read — give it back
        with :meth:`release` — or None when there is no such file."""
        key = (owner, path)
        with self._lock:
            self._check_fork()
            h = self._open.get(key)
            if h is not None:
                self._open.move_to_end(key)
                h.users += 1
                return h
            version = self._versions.get(path, 0)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        h = _FileHandle(fd)
        with self._lock:
            self._check_fork()
            h.users = 1
            if self._versions.get(path, 0) != version:
                h.retired = True  # replaced while we opened it (a writer thread): good for this read only
                return h
            kept = self._open.get(key)
            if kept is not None:  # another thread opened it meanwhile; nobody else has ours
                os.close(fd)
                kept.users += 1
                return kept
            self._open[key] = h
            while len(self._open) > MAX_OPEN_FILES:
                self._retire(self._open.popitem(last=False)[1])
        return h

    def acquire(self, h: _FileHandle) -> bool:
        """Use ``h`` (a handle kept from an earlier :meth:`open`) for one more read: False when it was
        retired meanwhile (open the file again)."""
        with self._lock:
            if h.retired:
                return False
            h.users += 1
            return True

    def release(self, h: _FileHandle) -> None:
        """One read through ``h`` is done."""
        with self._lock:
            h.users -= 1
            if h.retired and h.users == 0:
                _close(h)

    def forget(self, path: str) -> None:
        """``path`` was replaced (by this process): every owner's descriptor of it (the old bytes)
        is retired."""
        with self._lock:
            self._check_fork()
            self._versions[path] = self._versions.get(path, 0) + 1  # an open under way keeps out
            for key in [k for k in self._open if k[1] == path]:
                self._retire(self._open.pop(key))

    def release_all(self, owner: int | None = None, root: str | None = None) -> None:
        """Retire the descriptors of ``owner`` (a reader going away), or of every owner under
        directory ``root`` (its store was closed)."""
        prefix = root.rstrip("/") + "/" if root is not None else None
        with self._lock:
            self._check_fork()
            for key in [k for k in self._open
                        if (owner is not None and k[0] == owner) or (prefix is not None and k[1].startswith(prefix))]:
                self._retire(self._open.pop(key))

    def open_count(self) -> int:
        """Descriptors the pool holds open (for tests and diagnostics)."""
        with self._lock:
            self._check_fork()
            return len(self._open)

    @staticmethod
    def _retire(h: _FileHandle) -> None:  # under the pool's lock
        h.retired = True
        if h.users == 0:
            _close(h)


def _close(h: _FileHandle) -> None:
    try:
        os.close(h.fd)
    except OSError:  # pragma: no cover
        pass


FILES = _FilePool()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) gets a free lock: a parent thread may have held it at the
    fork, and the child's first read waited on it for ever.  The parent's descriptors are dropped,
    not closed, by the child's next call (:meth:`_FilePool._check_fork`)."""
    FILES._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_after_fork_in_child)
