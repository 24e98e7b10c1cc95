"""Replacing a store directory safely: under its writer lock, built beside it, swapped in at the end.

Every path that writes a whole store over an existing one (``save_to_path``, ``copy_from_path(...,
store=P)``, ``replaybuf import ... --overwrite``) goes through :func:`build_beside`, so that

* a store another process is recording into is never touched (its writer lock is taken first and
  held until the swap: :class:`~replaybuf_core.errors.StoreLockedError` names the holder);
* a failed or interrupted build leaves the old store as it was (the new one is written to a hidden
  sibling directory, removed on failure);
* the swap is two renames on one file system; a crash between them leaves the old store under
  ``.<name>.replaced-<pid>`` and the new one under ``.<name>.building-<pid>`` — both complete, nothing
  deleted.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import locking


def _sibling(path: Path, what: str) -> Path:
    return path.parent / f".{path.name}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@contextmanager
def build_beside(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh, not yet existing sibling path of ``path`` to build the new store in; on a
    clean exit swap it in for ``path`` (which may not exist), on an exception remove it and leave
    ``path`` alone.

    Raises:
        StoreLockedError: another process holds ``path``'s writer lock (raised before anything is
            built).
        FileExistsError: ``path`` exists and is not a directory.
    """
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a directory; refusing to replace it")
    lock = locking.acquire(path) if path.is_dir() else None
    tmp = _sibling(path, "building")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        if path.exists():
            old = _sibling(path, "replaced")
            os.rename(path, old)
            os.rename(tmp, path)
            if lock is not None:
                lock.release()
                lock = None
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            lock.release()


@contextmanager
def holding_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold ``path``'s writer lock (when it is a directory) while writing into it in place.

    Raises:
        StoreLockedError: another process holds it.
    """
    path = Path(os.path.expanduser(os.fspath(path)))
    lock = locking.acquire(path) if path.is_dir() else None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
