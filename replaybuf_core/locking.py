"""One writer, many readers: an advisory writer lock on a store directory.

A writable open of a store that lives in a local directory (a zarr ``LocalStore``) takes
``fcntl.flock(LOCK_EX)`` on ``<store>/.replaybuf.lock`` and writes the holder's pid into it.  The
kernel releases the lock when the process dies (SIGKILL included), so a killed recording never leaves
a stale lock; :meth:`StoreLock.release` (``ReplayBuffer.close()``) releases it earlier.  Read-only
opens take no lock.

Within one process, writable opens of the same directory share the lock (reference counted): the lock
excludes other *processes*.  A forked child does not inherit the right to write: its own writable open
raises :class:`~replaybuf_core.errors.StoreLockedError` while the parent holds the lock.  The lock is
advisory: code that writes the files without replaybuf is not stopped.

**Breaking it** (:func:`break_lock`, ``replaybuf unlock PATH --force``).  A paused holder (Ctrl-Z,
SIGSTOP) keeps its lock, and whatever file write it was about to make when it stopped it makes when
it goes on; a file system has no write conditional on who holds a lock.  So the one way to break a
live holder's lock without letting it write beside the next writer is to end it: the process the
kernel lists as holding the lock (``/proc/locks``) is sent SIGKILL — which also ends a stopped
process — and the lock is free once the kernel released it.  What it committed stays (a SIGKILL is a
crash the store recovers from); its uncommitted episodes are lost.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from .errors import StoreLockedError

LOCK_NAME = ".replaybuf.lock"

try:  # pragma: no cover - platform dependent
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locking
    fcntl = None  # type: ignore[assignment]

# re-entrant: a writable buffer's finalizer (``weakref.finalize`` → ``StoreLock.release``) runs where the
# garbage collector does, possibly inside this very lock in the same thread (an allocation under it)
_mutex = threading.RLock()
# realpath of the lock file -> [fd, reference count, pid of the process that took it]
_held: dict[str, list[int]] = {}


def process_running(pid: int) -> bool:
    """True when process ``pid`` of this host is running.  A process killed but not yet reaped by its
    parent (a zombie, ``/proc/<pid>/stat`` state Z) is not: it will never write again.  One of another
    user (``kill`` refused) counts as running; without ``/proc`` (not Linux) a zombie counts as running."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:  # "pid (name) S ...": the state follows the last ')'
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def lock_dir_of(store: Any) -> Path | None:
    """The directory a writer lock for ``store`` (a StorageBackend) goes in, or None when the store
    is not a local directory (memory stores, files handled by their own library).  Backends declare
    it with the optional ``lock_path()`` verb."""
    fn = getattr(store, "lock_path", None)
    if not callable(fn):
        return None
    path = fn()
    return Path(path) if path is not None else None


class StoreLock:
    """A share of the process's writer lock on one directory; :meth:`release` gives it back."""

    def __init__(self, key: str, directory: Path):
        self._key = key
        self.directory = directory
        self._pid = os.getpid()
        self._released = False

    @property
    def path(self) -> Path:
        """The lock file."""
        return self.directory / LOCK_NAME

    def release(self) -> None:
        """Give back this share; the last share unlocks and closes the lock file.  Idempotent; a no-op
        in a forked child (unlocking there would release the parent's lock)."""
        if self._released:
            return
        self._released = True
        if os.getpid() != self._pid:
            return
        with _mutex:
            entry = _held.get(self._key)
            if entry is None or entry[2] != self._pid:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _held[self._key]
            fd = entry[0]
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _holder_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text or "unknown"


def held_here(directory: str | os.PathLike) -> bool:
    """True when this process holds the writer lock of the store in ``directory`` (a writable
    ``ReplayBuffer`` on it is open here)."""
    key = os.path.realpath(Path(directory) / LOCK_NAME)
    with _mutex:
        entry = _held.get(key)
        return entry is not None and entry[2] == os.getpid()


def live_holder(directory: str | os.PathLike) -> str | None:
    """The pid (as its lock file gives it) of the live process holding the writer lock of the store in
    ``directory`` — this process's own when it holds it — or None when nobody does (no lock file, or
    an unlocked one).  Creates nothing: a read-only open asks it.  Probes with a shared
    ``flock`` taken and dropped at once, so a writer acquiring at that very instant may be refused
    once (``StoreLockedError``) — ask only when there is reason to (an edit journal found)."""
    if fcntl is None:  # pragma: no cover
        return None
    if held_here(directory):
        return str(os.getpid())
    try:
        fd = os.open(Path(directory) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def acquire(directory: str | os.PathLike) -> StoreLock | None:
    """Take (or share, within this process) the writer lock of the store in ``directory``.

    Returns:
        a :class:`StoreLock`, or None where ``fcntl`` is unavailable (no locking).

    Raises:
        StoreLockedError: another process holds the lock (the message names its pid and the lock file).
        OSError: the lock file cannot be created (e.g. the directory is not writable).
    """
    if fcntl is None:  # pragma: no cover
        return None
    directory = Path(directory)
    lock_file = directory / LOCK_NAME
    key = os.path.realpath(lock_file)
    pid = os.getpid()
    with _mutex:
        entry = _held.get(key)
        if entry is not None and entry[2] == pid:
            entry[1] += 1
            return StoreLock(key, directory)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            raise StoreLockedError(
                f"{directory} is open for writing by process {holder} (lock file {lock_file}); "
                "one writer at a time — close it there, or open read-only "
                "(ReplayBuffer.create_from_path / read_only=True)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{pid}\n".encode("ascii"), 0)
        _held[key] = [fd, 1, pid]
        return StoreLock(key, directory)


def _flock_holders(lock_file: Path) -> list[int]:
    """The pids ``/proc/locks`` lists as holding a FLOCK on ``lock_file`` (empty without /proc)."""
    try:
        st = os.stat(lock_file)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            same = (int(major, 16), int(minor, 16), int(inode)) == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
            if same and int(parts[4]) > 0:
                pids.append(int(parts[4]))
        except ValueError:
            continue
    return pids


def _state(pid: int) -> str:
    """"running", "stopped" (SIGSTOP, Ctrl-Z) or "gone" for process ``pid`` of this host."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            code = f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return "gone"
    return "stopped" if code in (b"T", b"t") else "gone" if code in (b"Z", b"X") else "running"


def break_lock(directory: str | os.PathLike, *, force: bool = False, timeout: float = 10.0) -> str | None:
    """Break the writer lock of the store in ``directory`` (see the module docstring): with ``force``
    the holder — the process ``/proc/locks`` lists for the lock file, paused or not — is ended with
    SIGKILL, and this returns once the kernel released its lock.  Returns who held it (``"process
    <pid> (stopped)"``), or None when nobody does (a dead writer's lock is gone with it).

    Raises:
        StoreLockedError: ``force`` is False (the message names the holder and its state); this
            process holds it; the holder is not a process of this host (a store on a network file
            system), or cannot be signalled (another user's); or the lock is still held ``timeout``
            seconds after the kill (a child the holder forked shares it: end that one).
    """
    import signal
    import time

    directory = Path(directory)
    lock_file = directory / LOCK_NAME
    if held_here(directory):
        raise StoreLockedError(f"{directory}: this process holds the writer lock; close the ReplayBuffer instead")
    holder = live_holder(directory)
    if holder is None:
        return None
    pids = [p for p in _flock_holders(lock_file) if p != os.getpid()]
    if not pids:
        raise StoreLockedError(f"{directory} is locked (lock file {lock_file}, pid {holder} in it) by no process of "
                               "this host that /proc/locks lists (a writer on another host of a shared file system?); "
                               "it cannot be broken from here: stop that writer")
    who = ", ".join(f"process {p} ({_state(p)})" for p in pids)
    if not force:
        raise StoreLockedError(f"{directory} is open for writing by {who}. Stop it (a stopped one: `kill -CONT "
                               f"{pids[0]}` lets it go on), or break the lock with --force (force=True): that ends it "
                               "with SIGKILL — what it committed stays, its uncommitted episodes are lost")
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            raise StoreLockedError(f"{directory}: the writer lock is held by {who}, which this user may not "
                                   "signal; it cannot be broken from here") from None
    deadline = time.monotonic() + timeout
    while live_holder(directory) is not None:
        if time.monotonic() > deadline:
            raise StoreLockedError(f"{directory}: {who} was sent SIGKILL but the lock is still held {timeout:.0f} s "
                                   "later (a process it forked shares the lock file: end that one too)")
        time.sleep(0.02)
    return who
