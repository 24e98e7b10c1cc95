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
:class:`InterruptedEditError` rather than show a half-edited store — or, while a live process holds
the store's writer lock (the edit is running, not interrupted), :class:`EditInProgressError` naming
that process.  So a kill at any moment
leaves the old or the new store on the next open, never a mixture.  An interruption the editing
process survives (Ctrl-C, an error) is rolled back by that process at once, through the same
:func:`rollback` (:meth:`replaybuf_core.store.buffer_editing.EpisodeEditing._run_edit`): a journal is
left only by a kill.  Edits need the store to themselves: readers that opened it before an edit
may read rows while they move.

Deleting the last of 200 episodes rewrites nothing but the tail's partial chunk; deleting the first
rewrites everything.

**Lossy frame keys** (JPEG, lossy WebP, video: :mod:`replaybuf_core.store.lossy_frames`) are rewritten
with care for the pixels of the kept frames: their backup is stored losslessly (the store's exact frame
codec), so a kept frame is encoded once more, not twice; their rewrite starts at the first changed
*chunk* (a partial shard write keeps the other chunks' bytes), so deleting the last episodes of a JPEG
store (one frame a chunk) re-encodes no kept frame, and of a video store (GOPs of G frames) only the
kept frames of the chunk holding the new end; the rewritten rows are read back and compared with the
backup: :func:`rewrite` returns, per such key, how many kept frames were re-encoded, their worst PSNR
and the histograms the stored statistics need.  A roll-back writes such a key's backed-up pixels
through its codec again (one more generation for rows from its start on) and forgets its stored
statistics (:func:`rollback`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replaybuf_core.errors import CorruptStoreError, StoreLockedError
from replaybuf_core.layout.chunks import row_bytes
from replaybuf_core.protocol import CAP_SHARDS, CAP_VERSIONS, VERSIONS_GROUP, StorageBackend
from replaybuf_core.stats.kernels import channel_histograms

from .commit import EPISODE_ENDS
from .copying import block_rows
from .lossy_frames import ReencodedFrames, frame_histogram, lossy_keys, worst_psnr
from .row_moves import backup_by_bytes, moved_keys, runs_of, splice
from .versions import VERSIONS, delete_unread_undos, delta_prefix, log, note_appends, record
from .progress import progress_bar

__all__ = ["EDIT_JOURNAL", "UNDO_PREFIX", "EditInProgressError", "InterruptedEditError", "keep_ranges_for", "rewrite",
           "rollback"]

#: ``meta`` attribute holding the journal of an edit in progress
EDIT_JOURNAL = "replaybuf_edit"
#: prefix of the backup arrays of an edit (reserved: never a key)
UNDO_PREFIX = "_temp_undo."
#: prefix of the stored statistics' arrays (:mod:`replaybuf_core.store.stored_stats`), which follow edits
#: their own way
STATS_PREFIX = "_stats."
#: ``meta`` attribute describing the stored statistics (:mod:`replaybuf_core.store.stored_stats`)
STATS_RECORD = "replaybuf_stats"


class InterruptedEditError(CorruptStoreError):
    """A store holds an unfinished edit: open it writable (or ``replaybuf verify --repair``) to roll
    the edit back."""


class EditInProgressError(StoreLockedError):
    """A read-only open found an edit journal while a live process holds the store's writer lock: the
    edit is running, not interrupted; the message names the process.  Open the store once it is done."""


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


def _chunk_len(store: StorageBackend, key: str) -> int:
    """Rows per chunk of ``data/key`` (a lossy frame key's rewrite starts on a multiple)."""
    chunks = store.chunks("data", key) if hasattr(store, "chunks") else None
    return int((chunks or (1,))[0] or 1)


def _spans(start: int, stop: int, unit: int, step: int) -> list[tuple[int, int]]:
    """Rows ``[start, stop)`` cut into write blocks: the first up to the next multiple of ``unit``
    (a rewrite may start mid-shard), then ``step`` rows (a multiple of ``unit``) each, so every block
    after the first covers whole stored objects."""
    cuts = sorted({start, stop, *range(-(-start // unit) * unit, stop, step)})
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]


def _lossless_layout(store: StorageBackend, key: str) -> tuple[Any, Any, Any]:
    """``(chunks, codec, shards)`` for a lossless copy of the frame key ``data/key`` (its backup):
    the backend's exact frame codec when it has one, else the "default" preset on the key's chunks."""
    from replaybuf_core.layout.compressors import resolve_compressor
    from replaybuf_core.layout.sharding import frame_chunk_shape, frame_shard_shape

    shape = tuple(store.shape("data", key))
    shards = store.shards("data", key) if CAP_SHARDS in store.capabilities else None
    make = getattr(store, "image_codec", None)
    if callable(make):
        codec = make(None)
        chunks = frame_chunk_shape(shape, codec)
        return chunks, codec, (frame_shard_shape(chunks, int(shards[0])) if shards else None)
    return store.chunks("data", key), resolve_compressor("default"), shards


def _copy_rows(store: StorageBackend, group: str, src: str, a: int, b: int, dst: str,
               lossless: bool = False, hist: np.ndarray | None = None, bar: Any = None,
               dst_group: str | None = None) -> None:
    """Create ``group/dst`` holding rows ``[a, b)`` of ``group/src`` with the same layout — or, with
    ``lossless``, the layout of :func:`_lossless_layout` (a lossy frame key's backup keeps the pixels
    exactly).  ``hist`` (int64 (C, 256)): the copied rows' per-channel value counts are added to it;
    ``bar``: a progress bar told the copied rows' decoded bytes; ``dst_group``: where ``dst`` goes
    (default ``group``)."""
    dst_group = dst_group or group
    shape = tuple(store.shape(group, src))
    dtype = np.dtype(store.dtype(group, src))
    if lossless:
        chunks, codec, shards = _lossless_layout(store, src)
    else:
        chunks = store.chunks(group, src) if hasattr(store, "chunks") else None
        shards = store.shards(group, src) if CAP_SHARDS in store.capabilities else None
        codec = store.codec(group, src)
    store.create_array(dst_group, dst, shape=(b - a,) + shape[1:], dtype=dtype, chunks=chunks, codec=codec,
                       shards=shards)
    per_row = row_bytes(shape, dtype)
    step = block_rows(per_row, (shards or chunks or (None,))[0], chunks[0] if chunks else None)
    for r in range(a, b, step):
        block = store.read(group, src, r, min(b, r + step))
        store.write(dst_group, dst, r - a, block)
        if hist is not None:
            channel_histograms(np.asarray(block), hist)
        if bar is not None:
            bar.update(len(block) * per_row)


class Target:
    """What an edit makes of the store: its new ``episode_ends`` (int64), per data key the first row
    that changes (``first``), where each new row from there on comes from (:meth:`runs`) and the new
    per-episode meta rows (:meth:`meta`).  This one: the kept row ranges of the current store (an
    edit: ``ranges``, one per new episode, ``kept[i]`` the old episode of new episode ``i``); a
    restore's is :class:`~replaybuf_core.store.version_view.RestoreTarget`."""

    def __init__(self, old_ends: np.ndarray, ranges: list[tuple[int, int]], kept: np.ndarray):
        self.ranges = [(int(a), int(b)) for a, b in ranges]  # plain ints: :meth:`runs` walks them per key
        self.kept = np.asarray(kept, dtype=np.int64)
        self.ends = np.cumsum(np.array([b - a for a, b in self.ranges], dtype=np.int64), dtype=np.int64)
        first = 0  # the first row that changes: after the leading episodes kept whole and in place
        for (a, b), e in zip(self.ranges, kept):
            start_e = int(old_ends[e - 1]) if e else 0
            if (a, b) != (start_e, int(old_ends[e])) or a != first:
                break
            first = b
        self._first = first
        self.unchanged = first == self.n_steps == (int(old_ends[-1]) if old_ends.size else 0) \
            and self.ends.size == old_ends.size

    @property
    def n_steps(self) -> int:
        return int(self.ends[-1]) if self.ends.size else 0

    def first(self, key: str) -> int:
        return self._first

    def runs(self, key: str, s0: int, backup: str) -> list[tuple[str, int, int]]:
        """New rows ``[s0, n_steps)`` of ``key`` as ``(array, a, b)`` row runs; ``backup`` holds the
        old rows from ``s0`` on (its row 0 is old row ``s0``)."""
        return runs_of(backup, [(a - s0, b - s0) for a, b in _sources(s0, self._first, self.ranges)])

    def meta(self, name: str, backup: tuple[str, str], store: StorageBackend, n_old: int) -> np.ndarray:
        """The new rows of the per-episode meta array ``name`` (``backup``: (group, name) of its old rows)."""
        return np.asarray(store.read(backup[0], backup[1], 0, n_old))[self.kept]


def _runs_rows(store: StorageBackend, runs: list[tuple[str, int, int]], lo: int, hi: int,
               group: str) -> np.ndarray:
    """Positions ``[lo, hi)`` of the rows ``runs`` name, end to end, read from ``group``."""
    parts, pos = [], 0
    for name, a, b in runs:
        x, y = max(lo, pos), min(hi, pos + b - a)
        if x < y:
            parts.append(np.asarray(store.read(group, name, a + x - pos, a + y - pos)))
        pos += b - a
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def rewrite(buf: Any, ranges: list[tuple[int, int]] | None, kept: np.ndarray | None, kind: str,
            bar: Any = None, message: str | None = None, target: Any = None) -> dict[str, ReencodedFrames]:
    """Make ``buf``'s store hold the rows ``ranges`` (old row ranges, one per new episode, in
    increasing order, non-overlapping, each non-empty) as its episodes, ``kept[i]`` being the old
    episode of new episode ``i`` (per-episode meta rows follow it) — or what ``target`` says (a
    restore: :class:`Target`'s interface).  See the module docstring for the steps; ``kind`` names
    the edit in the journal.  The caller validated everything and holds the
    buffer's mutex; it refreshes its bookkeeping afterwards.  ``bar``: a tqdm bar (:mod:`.progress`),
    given as its total the bytes the edit moves (backed up, rewritten, a lossy key's rows read back)
    and told them as they move.

    The edit is a version (:mod:`.versions`): the version before it is recorded first (appends
    since the last one), the backups are kept as that version's undo, and the commit adds the
    edit's version (``message``, default a summary) in the same attribute write that clears the
    journal.

    Returns, per data key with a lossy frame codec that was rewritten, what happened to its kept
    frames (:class:`~replaybuf_core.store.lossy_frames.ReencodedFrames`); empty when nothing changed."""
    store: StorageBackend = buf._store
    old_ends = np.asarray(buf._ends[: buf._n_ep], dtype=np.int64)
    old_n = int(old_ends[-1]) if old_ends.size else 0
    target = Target(old_ends, ranges, kept) if target is None else target
    new_ends, new_n = target.ends, target.n_steps
    if target.unchanged:
        return {}  # nothing changes
    versions = note_appends(store, old_ends.size, old_n, force=True)  # the version the edit starts from
    # backups: kept as that version's undo on a backend with a versions group, else deleted at the end
    keep = CAP_VERSIONS in store.capabilities
    dgroup, mgroup = (VERSIONS_GROUP, VERSIONS_GROUP) if keep else ("data", "meta")
    vid = int(versions[-1]["id"])
    prefix, mprefix = (delta_prefix(vid) + "data.", delta_prefix(vid) + "meta.") if keep else (UNDO_PREFIX, UNDO_PREFIX)
    keys = buf.keys()
    moved = moved_keys(store, keys)  # frame keys whose rows move as stored bytes: nothing re-encoded
    lossy = [k for k in lossy_keys(store, keys) if k not in moved]
    # a lossy frame key re-encoded from its first changed chunk (a partial shard write keeps the
    # others' bytes), the others from their first changed stored object: a moved key's backup is then
    # whole objects (on local disk hard-linked, not copied: ``splice_rows``)
    grid = {k: _chunk_len(store, k) if k in lossy else _unit(store, k) for k in keys}
    starts = {k: (target.first(k) // grid[k]) * grid[k] for k in keys}
    meta_names = [EPISODE_ENDS] + episode_meta_arrays(store, old_ends.size)
    per_row = {k: row_bytes(store.shape("data", k), store.dtype("data", k)) for k in keys}
    bar = bar if bar is not None else progress_bar(kind, 0, False)
    bar.reset(total=sum(per_row[k] * (old_n - starts[k] + (new_n - starts[k]) * (2 if k in lossy else 1))
                        for k in keys))
    # 1. back up (moved keys as stored; other lossy frame keys losslessly: their kept frames are
    # encoded once more, not twice)
    _delete_backups(store)  # an unfinished earlier backup (never journaled)
    old_hist = {k: np.zeros((int(store.shape("data", k)[-1]), 256), np.int64) for k in lossy}
    for k in keys:
        if k in moved and backup_by_bytes(store, k, starts[k], old_n, prefix + k, dgroup):
            bar.update((old_n - starts[k]) * per_row[k])
            continue
        if k in moved:  # the backend could not after all: decoded and encoded like any lossy key
            moved.remove(k)
            if lossy_keys(store, [k]):
                lossy.append(k)
                old_hist[k] = np.zeros((int(store.shape("data", k)[-1]), 256), np.int64)
        _copy_rows(store, "data", k, starts[k], old_n, prefix + k, lossless=k in lossy, hist=old_hist.get(k),
                   bar=bar, dst_group=dgroup)
    for m in meta_names:
        _copy_rows(store, "meta", m, 0, int(store.shape("meta", m)[0]), mprefix + m, dst_group=mgroup)
    buf._persist()
    # 2. journal
    store.set_attrs("meta", {EDIT_JOURNAL: {"kind": kind, "n_steps": old_n, "n_episodes": int(old_ends.size),
                                            "starts": starts, "meta": meta_names, "lossy": lossy, "moved": moved,
                                            "prefix": prefix, "meta_prefix": mprefix, "groups": [dgroup, mgroup]}})
    buf._persist()
    # 3. rewrite from the backups: shrink first (a shrink overwrites the tail of the new last chunk; the
    # write below then encodes that chunk once, from the backup), then the new rows
    report = {}
    for k in keys:
        s0 = starts[k]
        runs = target.runs(k, s0, prefix + k)  # where new rows [s0, new_n) come from
        if k in moved:
            if splice(store, k, s0, runs, dgroup):
                bar.update((new_n - s0) * per_row[k])
                if k in lossy_keys(store, [k]):  # (rows of the first changed chunk on moved)
                    c0 = min(new_n, max(s0, (target.first(k) // _chunk_len(store, k)) * _chunk_len(store, k)))
                    report[k] = ReencodedFrames(key=k, first_row=c0, frames=0, worst_psnr_db=math.inf,
                                                old_hist=np.zeros((0, 256), np.int64),
                                                new_hist=np.zeros((0, 256), np.int64), moved=new_n - c0)
                continue
            fallback = True  # (a video chunk that would need more than 255 segments): decode and encode
        else:
            fallback = False
        store.resize("data", k, new_n)
        for a, b in _spans(s0, new_n, _unit(store, k), _step(store, k)):
            store.write("data", k, a, _runs_rows(store, runs, a - s0, b - s0, dgroup))
            bar.update((b - a) * per_row[k])
        if k in lossy:
            report[k] = _read_back(store, k, s0, new_n, runs, old_hist[k], bar, dgroup)
        elif fallback and lossy_keys(store, [k]):
            hist = frame_histogram(store, prefix + k, 0, int(store.shape(dgroup, prefix + k)[0]), dgroup)
            report[k] = _read_back(store, k, s0, new_n, runs, hist, bar, dgroup)
            report[k].unplanned = True  # its stored statistics counted the old pixels: recomputed
    store.resize("meta", EPISODE_ENDS, new_ends.size)
    if new_ends.size:
        store.write("meta", EPISODE_ENDS, 0, new_ends)
    for m in meta_names[1:]:
        values = target.meta(m, (mgroup, mprefix + m), store, old_ends.size)
        store.resize("meta", m, len(values))
        if len(values):
            store.write("meta", m, 0, values)
    from .commit import read_generation, write_commit_record

    write_commit_record(store, new_ends.size, new_n, generation=read_generation(store) + 1)  # an edit: next generation
    buf._persist()
    # 4. commit: the journal goes and the version is recorded in one write; the backups stay, as the
    # previous version's undo
    if keep:
        versions[-1]["undo"] = {"prefix": prefix, "meta_prefix": mprefix, "starts": starts, "meta": meta_names}
    record(versions, kind, message or _summary(kind, old_ends.size, old_n, new_ends.size, new_n), new_ends.size, new_n)
    store.set_attrs("meta", {EDIT_JOURNAL: None, VERSIONS: versions})
    buf._persist()
    if not keep:
        _delete_backups(store)
        buf._persist()
    return report


def _summary(kind: str, e0: int, n0: int, e1: int, n1: int) -> str:
    return f"{kind}: {e0} -> {e1} episodes, {n0} -> {n1} steps"


def _sources(s0: int, first: int, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The old row ranges of the new rows from ``s0`` on, in order (rows before ``first`` stay, then
    the kept ranges moved down)."""
    return [(s0, first)] + [(a, b) for a, b in ranges if b > first and a >= first]


def _step(store: StorageBackend, key: str) -> int:
    """Rows per rewrite block of ``data/key``: whole stored objects, about 32 MB."""
    shape = tuple(store.shape("data", key))
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * max(1, np.dtype(store.dtype("data", key)).itemsize)
    return block_rows(row_bytes, _unit(store, key), None)


def _read_back(store: StorageBackend, key: str, s0: int, new_n: int, runs: list[tuple[str, int, int]],
               old_hist: np.ndarray, bar: Any, group: str) -> ReencodedFrames:
    """Read the rewritten rows ``[s0, new_n)`` of the lossy frame key ``data/key`` back and compare
    each with its pre-edit pixels (``runs``: where they came from, the (lossless) backup): the
    re-encoded frames, their worst PSNR and the histograms of the rows before and after (``bar``
    told the bytes read)."""
    new_hist = np.zeros_like(old_hist)
    worst = float("nan") if new_n == s0 else float("inf")
    for a, b in _spans(s0, new_n, _unit(store, key), _step(store, key)):
        after = np.asarray(store.read("data", key, a, b))
        channel_histograms(after, new_hist)
        worst = min(worst, worst_psnr(_runs_rows(store, runs, a - s0, b - s0, group), after))
        bar.update(after.nbytes)
    return ReencodedFrames(key, s0, new_n - s0, worst, old_hist, new_hist)


def _clear_journal(store: StorageBackend) -> None:
    attrs = dict(store.get_attrs("meta"))
    if EDIT_JOURNAL in attrs:
        store.set_attrs("meta", {EDIT_JOURNAL: None})


def _delete_backups(store: StorageBackend) -> list[str]:
    """Delete edit backups that are nobody's: ``_temp_undo.*`` in ``data`` / ``meta``, and arrays of the
    versions group no version's undo names (an edit that never committed) and no live reader reads
    (:func:`~.versions.late_reader_undos`)."""
    gone = []
    for group in ("data", "meta"):
        for name in store.list_arrays(group):
            if name.startswith(UNDO_PREFIX):
                store.delete_array(group, name)
                gone.append(f"{group}/{name}")
    if CAP_VERSIONS in store.capabilities and store.has_group(VERSIONS_GROUP):
        from replaybuf_core import locking

        from .version_readers import held_store

        versions = log(store)
        gone += [f"{VERSIONS_GROUP}/{name}" for name in delete_unread_undos(
            store, versions, lambda: held_store(store, locking.lock_dir_of(store)), [int(v["id"]) for v in versions])]
    return gone


def pending(store: StorageBackend) -> dict | None:
    """The journal of an unfinished edit, or None."""
    j = store.get_attrs("meta").get(EDIT_JOURNAL)
    return j if isinstance(j, dict) else None


def rollback(store: StorageBackend, apply: bool) -> list[str]:
    """Undo an interrupted edit (see the module docstring): returns what was done, one line each.

    Lossy frame keys the edit journaled (``"lossy"``) get their backed-up pixels back through their
    codec (one more lossy generation from the key's rewrite start on) and their stored statistics are
    forgotten (recomputed on the next ``get_stats``): the line says so.

    Raises:
        EditInProgressError: a journal on a read-only store while a live process holds the store's
            writer lock: the edit is running, not interrupted (``apply`` False).
        InterruptedEditError: a journal on a read-only store otherwise (``apply`` False).
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
        _refuse_running_edit(store, kind)
        raise InterruptedEditError(
            f"the store holds an interrupted {kind} (meta attribute {EDIT_JOURNAL!r}; no process holds its writer "
            "lock): open it writable, or run `replaybuf verify --repair PATH`, to roll it back; nothing was read "
            "or changed")
    starts, meta_names = dict(journal["starts"]), list(journal["meta"])
    lossy = [k for k in journal.get("lossy", []) if k in starts]
    old_n, old_e = int(journal["n_steps"]), int(journal["n_episodes"])
    prefix = str(journal.get("prefix", UNDO_PREFIX))
    mprefix = str(journal.get("meta_prefix", prefix))
    dgroup, mgroup = journal.get("groups", ["data", "meta"])
    missing = [f"{dgroup}/{prefix}{k}" for k in starts if not store.has_array(dgroup, prefix + k)]
    missing += [f"{mgroup}/{mprefix}{m}" for m in meta_names if not store.has_array(mgroup, mprefix + m)]
    if missing:
        raise CorruptStoreError(f"an interrupted {kind} cannot be rolled back: its backups {missing} are missing; "
                                "nothing was changed")
    moved = set(journal.get("moved", []))
    for k, s0 in starts.items():
        n_undo = int(store.shape(dgroup, prefix + k)[0])
        if k in moved and splice(store, k, int(s0), [(prefix + k, 0, n_undo)] if n_undo else [], dgroup):
            continue  # its chunks back as they were stored: not one frame encoded
        if k in moved and k not in lossy and lossy_keys(store, [k]):
            lossy.append(k)  # written back through its codec: its statistics are recomputed
        store.resize("data", k, max(int(store.shape("data", k)[0]), old_n))
        for a, b in _spans(int(s0), int(s0) + n_undo, _unit(store, k), _step(store, k)):
            store.write("data", k, a, store.read(dgroup, prefix + k, a - int(s0), b - int(s0)))
        store.resize("data", k, old_n)
    for m in meta_names:
        n_m = int(store.shape(mgroup, mprefix + m)[0])
        store.resize("meta", m, n_m)
        if n_m:
            store.write("meta", m, 0, store.read(mgroup, mprefix + m, 0, n_m))
    ends = np.asarray(store.read("meta", EPISODE_ENDS, 0, old_e), dtype=np.int64)
    from .commit import write_commit_record

    write_commit_record(store, old_e, int(ends[-1]) if ends.size else 0)
    store.flush()
    _clear_journal(store)
    store.flush()
    _delete_backups(store)
    forget_lossy_stats(store, lossy)
    store.flush()
    done = [f"an interrupted {kind} was rolled back ({len(starts)} data keys, {len(meta_names)} meta arrays restored)"]
    done += [f"data/{k}: rows from {starts[k]} on were written back through its lossy codec (one more encode of "
             "those frames); its stored statistics are recomputed on the next get_stats" for k in lossy]
    return done


def forget_lossy_stats(store: StorageBackend, keys: list[str]) -> None:
    """Forget the stored statistics of ``keys`` (lossy frame keys a roll-back wrote back: their pixels
    are no longer the ones the statistics counted): their entries leave the ``meta`` attribute
    :data:`STATS_RECORD` (:mod:`replaybuf_core.store.stored_stats`), so they are recomputed on the next
    ``get_stats``; the arrays stay, unused."""
    rec = store.get_attrs("meta").get(STATS_RECORD)
    entries = rec.get("keys") if isinstance(rec, dict) else None
    if isinstance(entries, dict) and any(k in entries for k in keys):
        store.set_attrs("meta", {STATS_RECORD: {**rec, "keys": {k: v for k, v in entries.items() if k not in keys}}})


def _refuse_running_edit(store: StorageBackend, kind: str) -> None:
    """Raise :class:`EditInProgressError` when a live process holds the writer lock of ``store``, which
    holds an edit journal: that edit is running (a read-only open would see rows while they move)."""
    from replaybuf_core import locking

    where = locking.lock_dir_of(store)
    holder = locking.live_holder(where) if where is not None else None
    if holder is not None:
        raise EditInProgressError(
            f"{where} is being edited ({kind}) by process {holder}, which holds its writer lock "
            f"({where / locking.LOCK_NAME}): its rows are moving; open it again once the edit has finished "
            "(nothing was read or changed)")
