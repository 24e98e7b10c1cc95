"""Giving back the space HDF5 never reuses: a file rewritten with its live objects only.

HDF5 does not reuse the space of rewritten or deleted datasets (and replaybuf's files are made with
``fs_strategy="none"`` so that a killed writer never leaves chunks over bytes the flushed metadata
still points to: :data:`~replaybuf_hdf5.backend.CRASH_SAFE_FILE`), so edits grow a file.  h5py cannot
free space in place; :func:`compact_file` builds the compact file beside it and swaps it in:

1. every top-level group and dataset is copied into a new hidden sibling
   (``.<name>.compacting-<pid>-<hex>``) with ``h5py.Group.copy`` — HDF5's ``H5Ocopy``, which copies
   chunks as stored (no decompression, the same filters, chunk shapes and attributes) — and the
   root's attributes after them;
2. the new file is flushed to disk (``fsync``) and renamed over the old one (atomic on one file
   system), and the directory is synced.

A crash before the rename leaves the old file as it was and a sibling that the next compaction of
the file removes (its process is gone); after it, the new file is whole.  Readers that had the old
file open keep reading it (POSIX keeps the unlinked inode).  The caller must have closed the file.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import h5py

PREFIX = "compacting-"


def compact_file(path: str | os.PathLike, file_options: dict | None = None) -> tuple[int, int]:
    """Rewrite the closed HDF5 file ``path`` with its live objects only (see the module docstring);
    ``file_options`` go to ``h5py.File`` when creating the new file (e.g. ``fs_strategy``).

    Returns ``(bytes before, bytes after)``.

    Raises:
        OSError: the new file cannot be written (full disk...): the old file is left as it was and the
            partial one removed.
    """
    path = Path(path).resolve()  # a symlink's target is the file (the link stays)
    _remove_stale(path)
    before = path.stat().st_size
    tmp = path.with_name(f".{path.name}.{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with h5py.File(path, "r") as old, h5py.File(tmp, "w", **(file_options or {})) as new:
            for name in old:
                old.copy(old[name], new, name=name)
            for key in old.attrs:
                new.attrs.create(key, old.attrs[key], dtype=old.attrs.get_id(key).dtype)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_dir(path.parent)
    return before, path.stat().st_size


def _remove_stale(path: Path) -> None:
    """Remove compaction siblings of ``path`` whose process is gone (a compaction killed midway)."""
    from replaybuf_core.locking import process_running

    for p in path.parent.glob(f".{path.name}.{PREFIX}*"):
        try:
            pid = int(p.name[len(f".{path.name}.{PREFIX}"):].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not process_running(pid):
            p.unlink(missing_ok=True)


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
