"""Readers holding an older version of a store, so that ``gc`` never deletes what one reads.

A reader opening version ``v`` of a store in a local directory (``ReplayBuffer(path, version=...)``)
creates ``<store>/.replaybuf.readers/v<id>-<pid>-<random>`` and holds ``fcntl.flock(LOCK_SH)`` on it
until it closes; the kernel drops the lock when the process dies (SIGKILL included), so a killed
reader holds nothing.  :func:`held` lists the versions held by live readers — a file whose lock can
be taken exclusively is a dead reader's and is removed.  The reader takes its hold *before* it reads
the version log, and ``gc`` looks at the holds again after it wrote the shortened log, so a reader
either finds its version gone (an error naming the versions left) or has its undo kept.

On object storage a backend holds versions its own way, through two optional verbs —
``hold_version(id)`` (an object with ``release()``, or None) and ``held_versions()`` (id -> who) —
the zarr backend with renewed, expiring objects (:mod:`replaybuf_zarr.reader_holds`).
:func:`hold_store` and :func:`held_store` pick the way that fits a store.  Stores without either
(memory, a backend without the verbs) have no holds: ``gc`` there trusts its caller.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

try:  # pragma: no cover - platform dependent
    import fcntl
except ImportError:  # pragma: no cover - Windows: no holds
    fcntl = None  # type: ignore[assignment]

__all__ = ["READERS_DIR", "Hold", "hold", "held", "hold_store", "held_store"]

READERS_DIR = ".replaybuf.readers"


class Hold:
    """One reader's hold of one version; :meth:`release` ends it (idempotent)."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd
        self._pid = os.getpid()

    def release(self) -> None:
        """End the hold (its file removed).  In a forked child (a DataLoader worker dropping the
        buffer it inherited) it does nothing: the hold is its parent's."""
        if self._fd is None or os.getpid() != self._pid:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # (closing the descriptor drops its lock)


def hold(store_dir: str | os.PathLike | None, version_id: int) -> Hold | None:
    """Hold version ``version_id`` of the store in ``store_dir`` (None: not a local directory, no
    hold).  Raises OSError when the directory cannot be written (a read-only medium): the caller
    may go on without a hold."""
    if store_dir is None or fcntl is None:
        return None
    d = Path(store_dir) / READERS_DIR
    d.mkdir(exist_ok=True)
    while True:
        path = d / f"v{int(version_id)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        if os.fstat(fd).st_nlink:  # (a gc between open and flock took it for a dead reader's: again)
            return Hold(path, fd)
        os.close(fd)


def held(store_dir: str | os.PathLike | None) -> dict[int, list[int]]:
    """Version id -> pids of the live readers holding it, for the store in ``store_dir`` (empty when
    None or none); the files of dead readers are removed on the way."""
    if store_dir is None or fcntl is None:
        return {}
    d = Path(store_dir) / READERS_DIR
    out: dict[int, list[int]] = {}
    if not d.is_dir():
        return out
    for path in d.iterdir():
        try:
            vid, pid, _ = path.name[1:].split("-", 2)
            vid, pid = int(vid), int(pid)
        except ValueError:
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.setdefault(vid, []).append(pid)  # a live reader
        else:
            path.unlink(missing_ok=True)  # a dead reader's
        finally:
            os.close(fd)
    return out


def hold_store(store: Any, store_dir: str | os.PathLike | None, version_id: int) -> Any:
    """Hold version ``version_id`` of ``store`` (a StorageBackend): with a lock file when it is in
    the local directory ``store_dir`` (:func:`hold`), else through the backend's optional
    ``hold_version`` verb; None when neither holds.  Raises OSError (or what the backend raises) when
    the hold cannot be written: the caller may go on without one."""
    if store_dir is not None:
        return hold(store_dir, version_id)
    fn = getattr(store, "hold_version", None)
    return fn(int(version_id)) if callable(fn) else None


def held_store(store: Any, store_dir: str | os.PathLike | None) -> dict[int, list]:
    """Version id -> the live readers holding it (pids for a local directory, ``"host H pid P"`` from
    a backend's ``held_versions``), for ``store`` in the local directory ``store_dir`` or elsewhere."""
    if store_dir is not None:
        return held(store_dir)
    fn = getattr(store, "held_versions", None)
    return fn() if callable(fn) else {}
