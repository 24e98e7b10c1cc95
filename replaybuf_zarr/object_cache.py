"""A node's local byte cache of whole objects from object storage: a directory of files, bounded in
bytes, least recently used out first, shared by every process that opens a store with it (a rank's
DataLoader workers, the ranks of one node).

With it, the first read of any range of a shard fetches the whole object once (one GET, pinned to
the ETag the reader's HEAD saw) into ``<dir>/<digest of url, key and ETag>``; every later range of
that version — in this process or another on the node — is a ``pread`` of the file.  A replaced
object has another ETag, so another file: a stale version is never served, and ages out.  Files are
written beside and renamed into place (a reader sees a whole file or none; two processes fetching
the same object at once both write the same bytes).  After each insert the oldest files (by
modification time, refreshed on every hit) are removed until the directory holds at most
``max_bytes``; a file removed under a reader is fetched again.  A miss is fetched under an
exclusive ``flock`` of ``<file>.lock``, checked again once held: processes that miss the same
object at once fetch it once.

Meant for the streaming order of a mixture (``block`` / ``span``: a run of neighbouring windows at a
time, so a shard fetched is a shard used); under a random order over a large store it fetches whole
shards for single frames — leave it off there.

Configured per store by ``storage_options={"replaybuf_cache_dir": DIR, "replaybuf_cache_bytes": N}``
(read-only opens), or for every read-only open of a process and its children by the environment:
``REPLAYBUF_OBJECT_CACHE_DIR`` and ``REPLAYBUF_OBJECT_CACHE_BYTES`` (default 10 GiB).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from typing import Any, Callable, Iterator

__all__ = ["LocalObjectCache", "cache_from_options", "DEFAULT_BYTES"]

DEFAULT_BYTES = 10 * 2**30
_OPTIONS = ("replaybuf_cache_dir", "replaybuf_cache_bytes")


@contextlib.contextmanager
def _exclusive(lock_path: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock_path`` (created; left in place: tiny, reused) while inside."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no cross-process lock, only a duplicate fetch
        yield
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class LocalObjectCache:
    """Whole objects of one store in a directory, at most ``max_bytes`` in all (LRU by file mtime).

    Args:
        directory: created when missing; may be shared by several stores and processes.
        max_bytes: the bound of the directory's cached files, bytes (> 0).
        scope: what tells this store's objects from another's in a shared directory (its URL).

    Raises:
        ValueError: ``max_bytes`` not an int > 0.
    """

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_BYTES, scope: str = ""):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"replaybuf_cache_bytes must be an int > 0, got {max_bytes!r}")
        self.directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        os.makedirs(self.directory, exist_ok=True)
        self.max_bytes = max_bytes
        self.scope = scope
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _path(self, key: str, etag: str | None) -> str:
        digest = hashlib.sha256(f"{self.scope}\0{key}\0{etag}".encode()).hexdigest()[:40]
        return os.path.join(self.directory, digest + ".obj")

    def read(self, key: str, etag: str | None, start: int, stop: int, fetch: Callable[[], bytes]) -> bytes:
        """Bytes ``[start, stop)`` of object ``key`` at version ``etag``: from the cached file, else
        ``fetch()`` (the whole object, that version) stored first."""
        path = self._path(key, etag)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                break
            try:
                data = os.pread(fd, stop - start, start)
                os.utime(fd)  # recently used
            except FileNotFoundError:  # pragma: no cover - removed between open and utime
                data = None
            finally:
                os.close(fd)
            if data is not None:
                with self._lock:
                    self.hits += 1
                return data
        with _exclusive(path + ".lock"):  # one fetch of an object at a time on the node
            try:
                with open(path, "rb") as f:  # another process fetched it meanwhile
                    f.seek(start)
                    data = f.read(stop - start)
                with self._lock:
                    self.hits += 1
                return data
            except FileNotFoundError:
                pass
            whole = fetch()
            with self._lock:
                self.misses += 1
            self._store(path, whole)
        return whole[start:stop]

    def _store(self, path: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return  # larger than the whole cache: served, not kept
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        self._evict(keep=path)

    def _evict(self, keep: str) -> None:
        files = []
        with os.scandir(self.directory) as it:
            for entry in it:
                if entry.name.endswith(".obj"):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    files.append((st.st_mtime_ns, st.st_size, entry.path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            for gone in (path, path + ".lock"):  # (a lock unlinked under a waiter costs a duplicate fetch only)
                try:
                    os.unlink(gone)
                except FileNotFoundError:
                    pass
            total -= size

    @property
    def nbytes(self) -> int:
        """Bytes of cached files in the directory now (every store sharing it)."""
        total = 0
        with os.scandir(self.directory) as it:
            for entry in it:
                if entry.name.endswith(".obj"):
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        pass
        return total


def cache_from_options(url: str, storage_options: dict | None, read_only: bool) -> tuple[Any, dict | None]:
    """``(cache or None, the storage options left for obstore)``: the cache a read-only open of
    ``url`` asks for (its ``replaybuf_cache_*`` options, else the environment's), and the options
    without those keys.

    Raises:
        ValueError: cache options on a writable open, or a bad byte count.
    """
    options = dict(storage_options or {})
    mine = {k: options.pop(k) for k in _OPTIONS if k in options}
    if mine and not read_only:
        raise ValueError(f"{url}: {sorted(mine)} are for read-only opens (a local cache of what a reader fetches)")
    directory = mine.get("replaybuf_cache_dir") or (os.environ.get("REPLAYBUF_OBJECT_CACHE_DIR") if read_only else None)
    if not directory:
        return None, options or None
    size = mine.get("replaybuf_cache_bytes", os.environ.get("REPLAYBUF_OBJECT_CACHE_BYTES", DEFAULT_BYTES))
    try:
        size = int(float(size)) if isinstance(size, str) else size
    except ValueError:
        raise ValueError(f"replaybuf_cache_bytes must be an int > 0, got {size!r}") from None
    return LocalObjectCache(directory, size, scope=url.rstrip("/")), options or None
