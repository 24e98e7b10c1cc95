"""Editing a store in place — delete episodes, trim frames, keep a subset — crash-safely, rewriting
only from the first changed row on.

Every edit is "keep these row ranges, as these episodes": the new store is the old one up to the
first changed row, then the kept rows moved down.  How an edit runs (an *undo journal*):

1. **back up** the old tail: for every data key the rows from its first changed chunk/shard on go to
   ``data/_temp_undo.<key>``; ``meta/episode_ends`` and every per-episode meta array (1-D or more,
   one row per episode: ``source_episode_index``, ``episode_attrs``, masks) go whole to
   ``meta/_temp_undo.<name>``;
2. **journal**: the ``meta`` attribute :data:`EDIT_JOURNAL` records the old length, the first
   rewritten row of each key and the backed-up meta arrays — from here on an interruption is rolled
   back;
3. **rewrite** the tail of each data key in place from its backup (chunk/shard aligned, so each
   stored object is written once), shrink it, write the new ``episode_ends``, meta rows and commit
   record;
4. **commit**: clear the journal — the new store is the store — then delete the backups.

:func:`rollback` (run by every writable open, through :func:`replaybuf_core.store.recovery.recover`)
finds a journal and puts the backed-up rows and arrays back; backups without a journal are an
unfinished step 1 and are deleted.  A read-only open of a store with a journal raises
:class:`InterruptedEditError` rather than show a half-edited store.  So a kill at any moment
leaves the old or the new store on the next open, never a mixture.  An interruption the editing
process survives (Ctrl-C, an error) is rolled back by that process at once, through the same
:func:`rollback` (:meth:`replaybuf_core.store.buffer_editing.EpisodeEditing._run_edit`): a journal is
left only by a kill.  Edits need the store to themselves: readers that opened it before an edit
may read rows while they move.

Deleting the last of 200 episodes rewrites nothing but the tail's partial chunk; deleting the first
rewrites everything.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.protocol import CAP_SHARDS, StorageBackend

from .commit import EPISODE_ENDS
from .copying import block_rows

__all__ = ["EDIT_JOURNAL", "UNDO_PREFIX", "InterruptedEditError", "keep_ranges_for", "rewrite", "rollback"]

#: ``meta`` attribute holding the journal of an edit in progress
EDIT_JOURNAL = "replaybuf_edit"
#: prefix of the backup arrays of an edit (reserved: never a key)
UNDO_PREFIX = "_temp_undo."
#: prefix of the stored statistics' arrays (:mod:`replaybuf_core.store.stored_stats`), which follow edits
#: their own way
STATS_PREFIX = "_stats."


class InterruptedEditError(CorruptStoreError):
    """A store holds an unfinished edit: open it writable (or ``replaybuf verify --repair``) to roll
    the edit back."""


def episode_meta_arrays(store: StorageBackend, n_episodes: int) -> list[str]:
    """The meta arrays holding one row per episode (length ``n_episodes``, at least 1-D), besides
    ``episode_ends``, backups and the stored statistics."""
    out = []
    for name in store.list_arrays("meta"):
        if name == EPISODE_ENDS or name.startswith(("_temp", UNDO_PREFIX, STATS_PREFIX)):
            continue
        shape = tuple(store.shape("meta", name))
        if shape and shape[0] == n_episodes:
            out.append(name)
    return out


def keep_ranges_for(ends: np.ndarray, episodes: np.ndarray, trims: dict[int, tuple[int, int]] | None = None):
    """``(ranges, kept)``: the old row range ``(a, b)`` of each new episode, in order, and the old
    episode index of each; ``trims`` maps an old episode to its kept ``[start, stop)`` steps."""
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    ranges = []
    for e in episodes:
        a, b = int(starts[e]), int(ends[e])
        if trims and int(e) in trims:
            lo, hi = trims[int(e)]
            a, b = a + lo, a + hi
        ranges.append((a, b))
    return ranges, np.asarray(episodes, dtype=np.int64)


def _unit(store: StorageBackend, key: str) -> int:
    """Rows per stored object (shard, else chunk) of ``data/key``: rewrites start on a multiple."""
    shards = store.shards("data", key) if CAP_SHARDS in store.capabilities else None
    chunks = store.chunks("data", key) if hasattr(store, "chunks") else None
    return int((shards or chunks or (1,))[0] or 1)


def _copy_rows(store: StorageBackend, group: str, src: str, a: int, b: int, dst: str) -> None:
    """Create ``group/dst`` holding rows ``[a, b)`` of ``group/src`` with the same layout."""
    shape = tuple(store.shape(group, src))
    dtype = np.dtype(store.dtype(group, src))
    chunks = store.chunks(group, src) if hasattr(store, "chunks") else None
    shards = store.shards(group, src) if CAP_SHARDS in store.capabilities else None
    store.create_array(group, dst, shape=(b - a,) + shape[1:], dtype=dtype, chunks=chunks,
                       codec=store.codec(group, src), shards=shards)
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * (dtype.itemsize if dtype != object else 64)
    step = block_rows(row_bytes, (shards or chunks or (None,))[0], chunks[0] if chunks else None)
    for r in range(a, b, step):
        store.write(group, dst, r - a, store.read(group, src, r, min(b, r + step)))


def _gather(store: StorageBackend, name: str, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (increasing int64) of ``data/name``, read run by contiguous run (a block never
    spans the rows between two runs)."""
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    parts = [np.asarray(store.read("data", name, int(run[0]), int(run[-1]) + 1)) for run in np.split(rows, cut)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def rewrite(buf: Any, ranges: list[tuple[int, int]], kept: np.ndarray, kind: str) -> None:
    """Make ``buf``'s store hold the rows ``ranges`` (old row ranges, one per new episode, in
    increasing order, non-overlapping, each non-empty) as its episodes, ``kept[i]`` being the old
    episode of new episode ``i`` (per-episode meta rows follow it).  See the module docstring for the
    steps; ``kind`` names the edit in the journal.  The caller validated everything and holds the
    buffer's mutex; it refreshes its bookkeeping afterwards."""
    store: StorageBackend = buf._store
    old_ends = np.asarray(buf._ends[: buf._n_ep], dtype=np.int64)
    old_n = int(old_ends[-1]) if old_ends.size else 0
    lengths = np.array([b - a for a, b in ranges], dtype=np.int64)
    new_ends = np.cumsum(lengths, dtype=np.int64)
    new_n = int(new_ends[-1]) if new_ends.size else 0
    # the first row that changes: after the leading episodes kept whole and in place
    first = 0
    for (a, b), e in zip(ranges, kept):
        start_e = int(old_ends[e - 1]) if e else 0
        if (a, b) != (start_e, int(old_ends[e])) or a != first:
            break
        first = b
    if first == new_n == old_n and new_ends.size == old_ends.size:
        return  # nothing changes
    keys = buf.keys()
    starts = {k: (first // _unit(store, k)) * _unit(store, k) for k in keys}
    meta_names = [EPISODE_ENDS] + episode_meta_arrays(store, old_ends.size)
    # 1. back up
    _delete_backups(store)  # an unfinished earlier backup (never journaled)
    for k in keys:
        _copy_rows(store, "data", k, starts[k], old_n, UNDO_PREFIX + k)
    for m in meta_names:
        _copy_rows(store, "meta", m, 0, int(store.shape("meta", m)[0]), UNDO_PREFIX + m)
    buf._persist()
    # 2. journal
    store.set_attrs("meta", {EDIT_JOURNAL: {"kind": kind, "n_steps": old_n, "n_episodes": int(old_ends.size),
                                            "starts": starts, "meta": meta_names}})
    buf._persist()
    # 3. rewrite from the backups
    for k in keys:
        s0 = starts[k]
        shape = tuple(store.shape("data", k))
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * max(1, np.dtype(store.dtype("data", k)).itemsize)
        step = block_rows(row_bytes, _unit(store, k), None)
        # new rows [s0, new_n) come from old rows: before `first` unchanged, then the kept ranges
        pieces = [(s0, first)] + [(a, b) for a, b in ranges if b > first and a >= first]
        src = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in pieces]) if pieces else np.zeros(0, np.int64)
        for r in range(0, src.size, step):
            store.write("data", k, s0 + r, _gather(store, UNDO_PREFIX + k, src[r: r + step] - s0))
        store.resize("data", k, new_n)
    store.resize("meta", EPISODE_ENDS, new_ends.size)
    if new_ends.size:
        store.write("meta", EPISODE_ENDS, 0, new_ends)
    for m in meta_names[1:]:
        values = np.asarray(store.read("meta", UNDO_PREFIX + m, 0, old_ends.size))[kept]
        store.resize("meta", m, kept.size)
        if kept.size:
            store.write("meta", m, 0, values)
    from .commit import read_generation, write_commit_record

    write_commit_record(store, new_ends.size, new_n, generation=read_generation(store) + 1)  # an edit: next generation
    buf._persist()
    # 4. commit, then clean up
    _clear_journal(store)
    buf._persist()
    _delete_backups(store)
    buf._persist()


def _clear_journal(store: StorageBackend) -> None:
    attrs = dict(store.get_attrs("meta"))
    if EDIT_JOURNAL in attrs:
        store.set_attrs("meta", {EDIT_JOURNAL: None})


def _delete_backups(store: StorageBackend) -> list[str]:
    gone = []
    for group in ("data", "meta"):
        for name in store.list_arrays(group):
            if name.startswith(UNDO_PREFIX):
                store.delete_array(group, name)
                gone.append(f"{group}/{name}")
    return gone


def pending(store: StorageBackend) -> dict | None:
    """The journal of an unfinished edit, or None."""
    j = store.get_attrs("meta").get(EDIT_JOURNAL)
    return j if isinstance(j, dict) else None


def rollback(store: StorageBackend, apply: bool) -> list[str]:
    """Undo an interrupted edit (see the module docstring): returns what was done, one line each.

    Raises:
        InterruptedEditError: a journal on a read-only store (``apply`` False).
        CorruptStoreError: a journal whose backups are missing (damage: nothing is changed).
    """
    journal = pending(store)
    if journal is None:
        if not apply:
            return []
        gone = _delete_backups(store)  # no journal: an edit that never began rewriting, or one finished
        return [f"{g}: leftover backup of an edit (never begun or already committed), deleted" for g in gone]
    kind = journal.get("kind", "edit")
    if not apply:
        raise InterruptedEditError(
            f"the store holds an interrupted {kind} (meta attribute {EDIT_JOURNAL!r}): open it writable, "
            "or run `replaybuf verify --repair PATH`, to roll it back; nothing was read or changed")
    starts, meta_names = dict(journal["starts"]), list(journal["meta"])
    old_n, old_e = int(journal["n_steps"]), int(journal["n_episodes"])
    missing = [f"data/{UNDO_PREFIX}{k}" for k in starts if not store.has_array("data", UNDO_PREFIX + k)]
    missing += [f"meta/{UNDO_PREFIX}{m}" for m in meta_names if not store.has_array("meta", UNDO_PREFIX + m)]
    if missing:
        raise CorruptStoreError(f"an interrupted {kind} cannot be rolled back: its backups {missing} are missing; "
                                "nothing was changed")
    for k, s0 in starts.items():
        n_undo = int(store.shape("data", UNDO_PREFIX + k)[0])
        store.resize("data", k, max(int(store.shape("data", k)[0]), old_n))
        shape = tuple(store.shape("data", k))
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * max(1, np.dtype(store.dtype("data", k)).itemsize)
        step = block_rows(row_bytes, _unit(store, k), None)
        for r in range(0, n_undo, step):
            store.write("data", k, int(s0) + r, store.read("data", UNDO_PREFIX + k, r, min(n_undo, r + step)))
        store.resize("data", k, old_n)
    for m in meta_names:
        n_m = int(store.shape("meta", UNDO_PREFIX + m)[0])
        store.resize("meta", m, n_m)
        if n_m:
            store.write("meta", m, 0, store.read("meta", UNDO_PREFIX + m, 0, n_m))
    ends = np.asarray(store.read("meta", EPISODE_ENDS, 0, old_e), dtype=np.int64)
    from .commit import write_commit_record

    write_commit_record(store, old_e, int(ends[-1]) if ends.size else 0)
    store.flush()
    _clear_journal(store)
    store.flush()
    _delete_backups(store)
    store.flush()
    return [f"an interrupted {kind} was rolled back ({len(starts)} data keys, {len(meta_names)} meta arrays restored)"]
