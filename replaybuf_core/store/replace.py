"""Replacing a store directory safely: under its writer lock, built beside it, swapped in at the end.

Every path that writes a whole store over an existing one (``save_to_path``, ``copy_from_path(...,
store=P)``, ``replaybuf import ... --overwrite``) goes through :func:`build_beside`, so that

* a store another process is recording into is never touched (its writer lock is taken first and
  held until the swap: :class:`~replaybuf_core.errors.StoreLockedError` names the holder);
* a failed or interrupted build leaves the old store as it was (the new one is written to a hidden
  sibling directory, removed on failure);
* the swap is two renames on one file system, which a Ctrl-C does not cut (it is taken after them);
  a crash between them leaves the old store under ``.<name>.replaced-<pid>`` and the new one under
  ``.<name>.building-<pid>`` — both complete, nothing deleted;
* what an interrupted or killed build leaves (a build a second Ctrl-C cut the removal of, the old
  store of a swap made, half deleted) is removed by the next build beside the same path once its
  process is gone — or, when the caller can continue it (``adopt``: an import resuming where a killed
  run stopped), taken over: renamed to this process's build, atomically, so two processes never both
  take it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from replaybuf_core import locking
from replaybuf_core.errors import StoreLockedError
from replaybuf_core.interrupts import deferred_sigint


def _sibling(path: Path, what: str) -> Path:
    return path.parent / f".{path.name}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Beside:
    """What :func:`build_beside` yields: ``path``, where to build the new store (it does not exist
    yet), and ``swap``: set it False to abandon the build (it is removed, the old store stays);
    ``link_target``: where the destination pointed when it was a symlink (the link is what the swap
    replaces; its target is left as it was), else None."""

    def __init__(self, path: Path, link_target: str | None = None):
        self.path = path
        self.swap = True
        self.link_target = link_target
        #: True when ``path`` holds a dead process's build taken over (``build_beside(adopt=...)``)
        self.adopted = False
        #: set True to keep the build when a Ctrl-C / SIGTERM (``KeyboardInterrupt``) ends it — a
        #: build the next run can continue (an import on a Dask cluster); other errors still remove it
        self.keep_if_interrupted = False


@contextmanager
def build_beside(path: str | os.PathLike, replaceable: Callable[[Path], bool] | None = None,
                 adopt: Callable[[Path], bool] | None = None) -> Iterator[Beside]:
    """Build a store (directory or file) beside ``path`` and swap it in at the end.

    Yields a :class:`Beside` whose ``path`` is a fresh hidden sibling of ``path``.  On a clean exit
    (with ``swap`` left True) the new store replaces ``path`` (which may not exist); on an exception,
    or with ``swap`` set False, the new one is removed and ``path`` is left alone.  An existing
    directory's writer lock is held from the start to the swap.  A symlink at ``path`` is replaced
    itself, never its target: no lock is taken there and nothing is written into it.

    Leftover builds of dead processes beside ``path`` (a SIGKILL mid-build) are removed first.
    ``replaceable(path)``, when given, says instead which existing ``path`` may be replaced (an
    export's own format: a LeRobot dataset, a robomimic file); by default only a replay buffer's
    store is.  ``adopt(build)``, when given, is asked about each leftover build of a dead process
    before it is removed: the first it accepts is renamed to the yielded ``path`` (``adopted`` is
    then True) instead — the caller continues it.  A live process's build is never offered.

    Raises:
        StoreLockedError: another process holds ``path``'s writer lock, or this process has a
            writable buffer open on it (before anything is built).
        ValueError: ``path`` is a URL (``scheme://...``): only local paths are replaced here.
        FileExistsError: ``path`` exists and is neither an empty directory nor a store an installed
            backend recognises (or what ``replaceable`` accepts): a folder of other files, a document
            is never replaced.
    """
    text = os.fspath(path)
    if "://" in text:
        raise ValueError(f"{text} is a URL, not a local path; replacing it in place is not supported")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    _refuse_replacing_what_is_not_a_store(path, replaceable)
    link = os.readlink(path) if path.is_symlink() else None
    if link is None and path.is_dir() and locking.held_here(path):
        raise StoreLockedError(f"{path} is open for writing in this process (a writable ReplayBuffer on "
                               "it): close that buffer before replacing the store under it")
    lock = locking.acquire(path) if path.is_dir() and link is None else None  # (a link's target is not touched)
    beside = Beside(_sibling(path, "building"), link)
    old = None
    try:
        beside.adopted = _remove_stale_builds(path, adopt, beside.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        yield beside
        with deferred_sigint():  # a Ctrl-C between the two renames would leave no store at ``path``
            if not beside.swap:
                _remove(beside.path)
            elif path.exists() or path.is_symlink():
                aside = _sibling(path, "replaced")
                os.rename(path, aside)
                try:
                    os.rename(beside.path, path)
                except BaseException:
                    os.rename(aside, path)  # the old store back in its place
                    raise
                old = aside  # removed below, once the lock is released
                if lock is not None:
                    lock.release()
                    lock = None
            else:
                os.rename(beside.path, path)
    except BaseException as exc:
        if not (beside.keep_if_interrupted and isinstance(exc, KeyboardInterrupt)):
            _remove(beside.path)  # (gone already when the interrupt came after the swap)
        raise
    finally:
        if lock is not None:
            lock.release()
        if old is not None:  # what a second Ctrl-C leaves of it, the next build beside ``path`` removes
            _remove(old)


def _refuse_replacing_what_is_not_a_store(path: Path, replaceable: Callable[[Path], bool] | None = None) -> None:
    """FileExistsError unless ``path`` is absent, a symlink (the link is replaced, never its target),
    an empty directory, or a replay buffer's store: it opens read-only with the backend that claims
    it and holds ``meta/episode_ends`` or data arrays (a name such as ``x.zarr`` or ``x.h5`` is not
    enough: a folder or an HDF5 file of other things is never replaced)."""
    if not path.exists() or path.is_symlink() or (path.is_dir() and not any(path.iterdir())):
        return
    if replaceable is not None:
        if not replaceable(path):
            raise FileExistsError(f"{path} exists and is not a dataset of the format being written; refusing to "
                                  "replace it: choose another destination or remove it yourself")
        return
    from replaybuf_core.registry import guess_backend

    try:  # a name (x.zarr, x.h5) is not enough: it must open as a replay buffer's store
        store = guess_backend(os.fspath(path)).open(os.fspath(path), read_only=True)
        try:
            is_store = "episode_ends" in store.list_arrays("meta") or bool(store.list_arrays("data"))
        finally:
            store.close()
    except Exception:  # noqa: BLE001 - whatever does not open as a store is not replaced
        is_store = False
    if not is_store:
        kind = "a directory" if path.is_dir() else "a file"
        raise FileExistsError(f"{path} exists and is {kind} that is not a store (it does not open as a replay "
                              "buffer); refusing to replace it: choose another destination or remove it "
                              "yourself") from None


def _remove_stale_builds(path: Path, adopt: Callable[[Path], bool] | None = None, into: Path | None = None) -> bool:
    """Remove what a process that is gone (killed by SIGKILL, a power cut, a second Ctrl-C during its
    clean-up) left beside ``path``: its ``.<name>.building-<pid>-*`` builds, the builds nested in
    them (``..<name>.building-<pid>-*.building-*``, which merges made before they built into their
    own build), and — when ``path`` itself exists, so the swap was made — the old store it moved
    aside to delete (``.<name>.replaced-<pid>-*``).  A build of a live process is left alone, and so
    is an old store moved aside while ``path`` is missing (a swap cut between its two renames by a
    power cut: committed data, never deleted here).

    With ``adopt``, the first dead top-level build it accepts is renamed to ``into`` instead (an
    atomic rename: of two processes offered the same build, one gets it, the other's rename fails
    and it goes on without).  Returns True when a build was so adopted."""
    kinds = ("building", "replaced") if (path.exists() or path.is_symlink()) else ("building",)
    adopted = False
    for kind in kinds:
        prefix = f".{path.name}.{kind}-"
        for p in _left_by_gone_processes(path, kind, nested=True):
            if adopt is not None and into is not None and not adopted and kind == "building" \
                    and p.name.startswith(prefix) and adopt(p):
                try:
                    os.rename(p, into)
                    adopted = True
                    continue
                except OSError:  # taken by another process meanwhile (or gone): build anew
                    continue
            _remove(p)
    return adopted


def interrupted_swap_hint(path: str | os.PathLike) -> str | None:
    """Where a store went that a swap cut between its two renames (:func:`build_beside`: a power cut
    or SIGKILL) left missing at ``path``: a sentence naming the old store, moved aside complete
    (``.<name>.replaced-<pid>-*``), and the new one (``.<name>.building-<pid>-*``) of processes that
    are gone — for the error of an open of the missing ``path``.  None when ``path`` exists or
    nothing of the kind is beside it.  Nothing is renamed or deleted: which one is the store is the
    user's call."""
    text = os.fspath(path)
    if "://" in text:
        return None
    path = Path(os.path.abspath(os.path.expanduser(text)))
    if path.exists() or path.is_symlink() or not path.parent.is_dir():
        return None
    found = {kind: gone[0] for kind in ("replaced", "building") if (gone := _left_by_gone_processes(path, kind))}
    if "replaced" not in found:
        return None
    return (f"a command that was replacing it (copy / merge / import --overwrite) was killed between its two renames: "
            f"the old store is complete at {found['replaced']}"
            + (f" and the new one at {found['building']}" if "building" in found else "")
            + f"; rename the one you want back to {path}")


def _left_by_gone_processes(path: Path, kind: str, nested: bool = False) -> list[Path]:
    """The ``.<name>.<kind>-<pid>-*`` siblings of ``path`` (``kind``: ``building`` / ``replaced``) whose
    process is gone (another user's process counts as live; this process's are not gone), sorted;
    with ``nested``, also the builds nested in them (``..<name>.<kind>-*``: merges build into their own
    build first)."""
    prefix = f".{path.name}.{kind}-"
    found = sorted(path.parent.glob(f"{prefix}*")) + (list(path.parent.glob(f".{prefix}*")) if nested else [])
    out = []
    for p in found:
        try:
            pid = int(p.name[p.name.index(prefix) + len(prefix):].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not locking.process_running(pid):
            out.append(p)
    return out


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


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
