"""Recovery of a store left behind by an interrupted write (Ctrl-C, a killed job, a crash).

One implementation, called by :class:`~replaybuf_core.ReplayBuffer` on every open (writable opens
repair, read-only opens only look) and by ``replaybuf verify --repair``.

What an interrupted write can leave, and what :func:`recover` does about it (zarr writes an array's
``zarr.json`` — its new length — before the chunks, so every grow can be cut short after the length
changed):

* **interrupted append** — data arrays longer than ``meta/episode_ends[-1]``: the rows past it were
  never committed.  Repair: shrink the arrays back (the backend's ``resize`` overwrites the tail of
  the last partial chunk with the fill value, so a later grow cannot bring stale rows back).
* **interrupted commit** — ``meta/episode_ends`` ending in a run of its fill value (replaybuf creates
  it with ``fill_value=-1``): the length was written, the values were not.  Repair: drop those entries.
* **interrupted rechunk/recompress swap** (:func:`~replaybuf_core.store.buffer.rechunk_array` writes
  ``_temp.<name>``, renames ``<name>`` → ``_temp_old.<name>``, ``_temp.<name>`` → ``<name>``, then deletes
  the backup): ``<name>`` missing and ``_temp_old.<name>`` present → rename the backup back (roll back);
  a leftover ``_temp.<name>`` / ``_temp_old.<name>`` beside ``<name>`` → delete it.  Temp arrays are never
  data keys.

Everything else — ``data``/``meta``/``episode_ends`` missing, ``episode_ends`` not 1-D integer, negative
or decreasing, a data array shorter than ``episode_ends[-1]`` — is a
:class:`~replaybuf_core.errors.CorruptStoreError` naming the key and the numbers: never a silent repair.

Damage must not pass for an interrupted write: a zeroed or deleted commit chunk reads as zeros or as
fill values, which look like "200 empty episodes" or "an interrupted commit", and trimming the data to
match would delete every committed step.  So:

* every commit also records ``{"n_episodes", "n_steps"}`` in the ``meta`` group's attributes
  (:data:`COMMIT_RECORD`; written after the ends when growing, before them when shrinking, so the
  record never claims more than is committed).  ``episode_ends`` holding fewer valid entries than
  the record, or a different ``episode_ends[n_episodes - 1]``, is damage;
* without a record (stores of other writers, older replaybuf): ``episode_ends`` made only of fill
  values while data arrays hold rows is damage;
* zero-length episodes (equal consecutive ends, or a first end of 0) are not something replaybuf
  writes: a store with them opens (3D-Diffusion-Policy stores have them) but is never trimmed — rows
  past its ``episode_ends[-1]`` or trailing fill values there are damage, not an interrupted write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replaybuf_core.errors import CorruptStoreError, ReadOnlyError
from replaybuf_core.layout.keys import TMP_KEY, is_temp_name
from replaybuf_core.protocol import CAP_VERSIONS, GROUPS, VERSIONS_GROUP, StorageBackend

from .commit import EPISODE_ENDS, EPISODE_ENDS_FILL, EPISODE_META, read_commit_record


@dataclass
class RecoveryReport:
    """What :func:`recover` found and (when ``applied``) did.

    Attributes:
        applied: True when the store was repaired (writable), False when only inspected (read-only).
        episode_ends: int64 (n_episodes,) the committed cumulative step counts.
        dropped_commits: trailing fill entries of ``meta/episode_ends`` (unfinished commit).
        extra_rows: data key → rows past ``n_steps`` (an unfinished append).
        extra_meta: per-episode meta array (listed in the ``meta`` attribute ``EPISODE_META``) → rows
            past ``n_episodes`` (staged by a commit that did not finish: an import killed mid-commit).
        restored: ``"group/name"`` arrays brought back from their rechunk backup.
        deleted: ``"group/name"`` temp arrays deleted (or, read-only, to delete).
        unresolved: anomalies left alone (a legacy ``_temp_old`` whose original name is unknown).
        aliases: ``(group, name) → stored name`` for arrays still under their backup name (read-only).
        hidden: ``(group, name)`` temp arrays hidden from listings.
        edits: interrupted edits rolled back, and edit backups deleted (:mod:`replaybuf_core.store.editing`).
    """

    applied: bool
    episode_ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dropped_commits: int = 0
    extra_rows: dict[str, int] = field(default_factory=dict)
    extra_meta: dict[str, int] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    aliases: dict[tuple[str, str], str] = field(default_factory=dict)
    hidden: set[tuple[str, str]] = field(default_factory=set)
    edits: list[str] = field(default_factory=list)

    @property
    def n_episodes(self) -> int:
        return int(self.episode_ends.size)

    @property
    def n_steps(self) -> int:
        return int(self.episode_ends[-1]) if self.episode_ends.size else 0

    @property
    def clean(self) -> bool:
        """True when the store needed nothing."""
        return not (self.dropped_commits or self.extra_rows or self.extra_meta or self.restored or self.deleted
                    or self.unresolved or self.hidden or self.edits)

    def messages(self) -> list[str]:
        """One human-readable line per finding, in the tense of what happened."""
        done = self.applied
        out = list(self.edits)
        for what in self.restored:
            out.append(f"{what}: an interrupted rechunk had moved it aside; "
                       + ("restored from its backup" if done else "read from its backup (read-only open)"))
        for what in self.deleted:
            out.append(f"{what}: leftover rechunk temp array " + ("deleted" if done else "hidden (read-only open)"))
        for what in self.unresolved:
            out.append(what)
        if self.dropped_commits:
            out.append(f"meta/episode_ends has {self.dropped_commits} trailing fill value(s) "
                       f"({EPISODE_ENDS_FILL}) from an interrupted commit; they are "
                       + ("dropped" if done else "hidden (read-only open)"))
        for key, extra in sorted(self.extra_rows.items()):
            out.append(f"data array {key!r} has {extra} steps past meta/episode_ends[-1]={self.n_steps} "
                       "(an interrupted append); they are " + ("dropped" if done else "hidden (read-only open)"))
        for name, extra in sorted(self.extra_meta.items()):
            out.append(f"meta/{name} has {extra} row(s) past the {self.n_episodes} committed episodes (an "
                       "interrupted commit); they are " + ("dropped" if done else "left (readers read the committed rows)"))
        return out

    def __str__(self) -> str:
        return "; ".join(self.messages()) if not self.clean else "store is clean"


def _fill_value(store: StorageBackend, group: str, name: str) -> Any:
    fv = getattr(store, "fill_value", None)
    if callable(fv):
        return fv(group, name)
    arr = store.get_array(group, name)
    for attr in ("fill_value", "fillvalue"):  # zarr, h5py
        if hasattr(arr, attr):
            return getattr(arr, attr)
    return None


def _recover_swaps(store: StorageBackend, group: str, rep: RecoveryReport, apply: bool) -> None:
    names = store.list_arrays(group)
    present = set(names)
    tmp_p, old_p = TMP_KEY + ".", TMP_KEY + "_old."
    for n in names:  # backups first: a missing original is rolled back before temps are cleared
        if n.startswith(old_p):
            orig = n[len(old_p):]
            if orig not in present:
                rep.restored.append(f"{group}/{orig}")
                if apply:
                    store.rename_array(group, n, orig)
                else:
                    rep.aliases[(group, orig)] = n
                    rep.hidden.add((group, n))
                present.add(orig)
                continue
            rep.deleted.append(f"{group}/{n}")
            if apply:
                store.delete_array(group, n)
            else:
                rep.hidden.add((group, n))
    for n in names:
        if n.startswith(tmp_p) or n == TMP_KEY:
            rep.deleted.append(f"{group}/{n}")
            if apply:
                store.delete_array(group, n)
            else:
                rep.hidden.add((group, n))
        elif n == TMP_KEY + "_old":
            rep.unresolved.append(f"{group}/{n}: a backup left by an older replaybuf's interrupted rechunk; "
                                  "its original name is unknown — kept and hidden, rename it by hand")
            rep.hidden.add((group, n))


def unfinished_commits(store: StorageBackend, ends: np.ndarray, name: str = EPISODE_ENDS) -> int:
    """Length of the trailing run of ``-1`` in ``ends`` (int64 (n,), the values of ``meta/<name>``)
    when that array's fill value is ``-1``: entries whose length was committed but whose values were
    never written (an interrupted commit).  0 otherwise."""
    ends = np.asarray(ends)
    if not ends.size or ends[-1] != EPISODE_ENDS_FILL:
        return 0
    fill = _fill_value(store, "meta", name)
    try:
        if fill is None or int(np.asarray(fill).reshape(-1)[0]) != EPISODE_ENDS_FILL:
            return 0
    except (TypeError, ValueError, IndexError):
        return 0
    k = ends.size
    while k and ends[k - 1] == EPISODE_ENDS_FILL:
        k -= 1
    return int(ends.size - k)


def _stored(rep: RecoveryReport, group: str, name: str) -> str:
    return rep.aliases.get((group, name), name)


def _load_episode_ends(store: StorageBackend, rep: RecoveryReport) -> np.ndarray:
    name = _stored(rep, "meta", EPISODE_ENDS)
    shape = tuple(store.shape("meta", name))
    dtype = np.dtype(store.dtype("meta", name))
    if len(shape) != 1:
        raise CorruptStoreError(f"meta/episode_ends must be 1-D, has shape {shape}")
    if dtype.kind not in "iu":
        raise CorruptStoreError(f"meta/episode_ends must hold integers, has dtype {dtype}")
    ends = np.asarray(store.read("meta", name, 0, shape[0]), dtype=np.int64).copy()
    rep.dropped_commits = unfinished_commits(store, ends, name)
    ends = ends[: ends.size - rep.dropped_commits].copy()
    if ends.size:
        neg = np.flatnonzero(ends < 0)
        if neg.size:
            i = int(neg[0])
            raise CorruptStoreError(f"meta/episode_ends[{i}] is {ends[i]}, negative")
        drops = np.flatnonzero(np.diff(ends) < 0)
        if drops.size:
            i = int(drops[0]) + 1
            raise CorruptStoreError(
                f"meta/episode_ends decreases at episode {i}: episode_ends[{i - 1}]={ends[i - 1]} > "
                f"episode_ends[{i}]={ends[i]}"
            )
    return ends


def _check_not_damage(store: StorageBackend, ends: np.ndarray, rep: RecoveryReport) -> None:
    """Raise CorruptStoreError when what looks like an interrupted write is damage (module doc)."""
    untouched = "; nothing was changed (restore meta/episode_ends from a backup, or rebuild it)"
    record = read_commit_record(store)
    if record is not None:
        n_ep, n_steps = record
        if ends.size < n_ep:
            raise CorruptStoreError(
                f"meta/episode_ends holds {ends.size} committed entries ({rep.dropped_commits} fill values) "
                f"but the last commit recorded {n_ep} episodes / {n_steps} steps: its chunk is damaged or "
                f"missing{untouched}")
        if n_ep and int(ends[n_ep - 1]) != n_steps:
            raise CorruptStoreError(
                f"meta/episode_ends[{n_ep - 1}] is {int(ends[n_ep - 1])} but the last commit recorded "
                f"{n_ep} episodes / {n_steps} steps: the array is damaged{untouched}")
    elif rep.dropped_commits and not ends.size and rep.extra_rows:
        raise CorruptStoreError(
            f"meta/episode_ends is all fill values ({rep.dropped_commits} x {EPISODE_ENDS_FILL}) while data "
            f"arrays hold rows ({', '.join(f'{k}: {v}' for k, v in sorted(rep.extra_rows.items()))}): "
            f"its chunk is missing or unreadable, not an interrupted commit{untouched}")
    if (rep.dropped_commits or rep.extra_rows) and ends.size and (ends[0] == 0 or np.any(np.diff(ends) == 0)):
        empty = np.flatnonzero(np.diff(ends, prepend=0) == 0)
        raise CorruptStoreError(
            f"meta/episode_ends has zero-length episodes ({', '.join(map(str, empty[:10].tolist()))}"
            f"{', ...' if empty.size > 10 else ''} of {ends.size}) and "
            + (f"{rep.dropped_commits} trailing fill values" if rep.dropped_commits else
               f"data rows past episode_ends[-1]={int(ends[-1])}")
            + f": replaybuf writes neither, so this is damage, not an interrupted write{untouched}")


def recover(store: StorageBackend, *, apply: bool | None = None) -> RecoveryReport:
    """Check ``store`` against the replay-buffer layout and undo interrupted writes (see module doc).

    Args:
        store: an open :class:`~replaybuf_core.protocol.StorageBackend`.
        apply: repair the store (default: when it is writable); False only inspects, and the report's
            ``aliases``/``hidden``/``episode_ends`` let a reader present the committed content.

    Returns:
        A :class:`RecoveryReport`; ``report.episode_ends`` (int64 (n_episodes,)) is the committed state.

    Raises:
        CorruptStoreError: ``data``/``meta`` group or ``meta/episode_ends`` missing; ``episode_ends`` not
            1-D integer, negative or decreasing; a data array shorter than ``episode_ends[-1]``
            (message names the key and both numbers); ``episode_ends`` disagreeing with the commit
            record, all fill values beside data, or zero-length episodes beside rows to trim (damage:
            see the module docstring).  Nothing is changed then.
        ReadOnlyError: ``apply=True`` on a read-only store.
    """
    apply = (not store.read_only) if apply is None else bool(apply)
    if apply and store.read_only:
        raise ReadOnlyError("recover(apply=True) needs a writable store; open it writable")
    for group in GROUPS:
        if not store.has_group(group):
            raise CorruptStoreError(f"the store has no {group!r} group")
    from .editing import rollback

    rolled_back = rollback(store, apply=False) if not apply else []  # read-only: refuse a half-edited store
    debris: list[str] = []
    remove_debris = getattr(store, "remove_debris", None)
    if apply and callable(remove_debris):  # never data: half-deleted array directories, partial files
        undos = (VERSIONS_GROUP,) if CAP_VERSIONS in store.capabilities and store.has_group(VERSIONS_GROUP) else ()
        for group in GROUPS + undos + ("",):  # (they would block a later rename to their name)
            debris.extend(f"{group or '(root)'}/{name} (debris)" for name in remove_debris(group))
    if apply:  # an interrupted edit is rolled back before anything else is judged
        rolled_back = rollback(store, apply=True)
    # first only look (nothing else changes if the store turns out damaged), then repair
    rep = _inspect(store, RecoveryReport(applied=False), apply=False)
    if apply:
        rep = RecoveryReport(applied=True, deleted=debris, edits=rolled_back)
        rep = _inspect(store, rep, apply=True)
        ends, n = rep.episode_ends, rep.n_steps
        if rep.dropped_commits:
            store.resize("meta", EPISODE_ENDS, ends.size)
        for key in rep.extra_rows:
            store.resize("data", key, n)
        for name in rep.extra_meta:
            store.resize("meta", name, ends.size)
        if not rep.clean:
            store.flush()
    return rep


def _inspect(store: StorageBackend, rep: RecoveryReport, apply: bool) -> RecoveryReport:
    """Fill ``rep`` with what :func:`recover` finds (renaming rechunk swaps back when ``apply``);
    raises CorruptStoreError for damage.  Returns ``rep`` with ``episode_ends`` set."""
    for group in GROUPS:
        _recover_swaps(store, group, rep, apply)
    if not store.has_array("meta", _stored(rep, "meta", EPISODE_ENDS)):
        raise CorruptStoreError("the store has no 'meta/episode_ends' array")
    ends = _load_episode_ends(store, rep)
    n = int(ends[-1]) if ends.size else 0
    keys = [k for k in store.list_arrays("data") if not is_temp_name(k)]
    keys += [name for (g, name) in rep.aliases if g == "data"]
    for key in sorted(set(keys)):
        shape = tuple(store.shape("data", _stored(rep, "data", key)))
        rows = shape[0] if shape else 0
        if rows < n:
            raise CorruptStoreError(f"data array {key!r} has {rows} rows but meta/episode_ends[-1] is {n}")
        if rows > n:
            rep.extra_rows[key] = rows - n
    _check_not_damage(store, ends, rep)
    for name in store.get_attrs("meta").get(EPISODE_META, []):
        if store.has_array("meta", name) and store.shape("meta", name) and store.shape("meta", name)[0] > ends.size:
            rep.extra_meta[name] = int(store.shape("meta", name)[0]) - int(ends.size)
    rep.episode_ends = ends
    return rep


def repair(path_or_store: Any, backend: str | None = None) -> RecoveryReport:
    """Open the store at ``path_or_store`` (a path or native root) writable, taking the writer lock
    when it is a local directory, run :func:`recover` on it and close it: what
    ``replaybuf verify --repair`` does.

    Raises:
        StoreLockedError: another process is writing to the store.
        CorruptStoreError: damage recovery does not repair (see :func:`recover`).
        FileNotFoundError / BackendNotFoundError: nothing to open.
    """
    import os

    from replaybuf_core import locking, registry

    obj = os.path.expanduser(os.fspath(path_or_store)) if isinstance(path_or_store, (str, os.PathLike)) \
        else path_or_store
    store = registry.open_backend(obj, backend=backend, read_only=False)
    lock_dir = locking.lock_dir_of(store)
    lock = locking.acquire(lock_dir) if lock_dir is not None else None
    try:
        return recover(store, apply=True)
    finally:
        try:
            store.close()
        finally:
            if lock is not None:
                lock.release()
