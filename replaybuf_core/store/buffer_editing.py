"""The editing verbs of :class:`~replaybuf_core.ReplayBuffer`: delete any episodes, trim an episode's
ends, keep a subset.  Each validates everything first (a refused call changes nothing), then runs
the crash-safe rewrite of :mod:`replaybuf_core.store.editing`, and brings the stored statistics along
(:class:`~replaybuf_core.store.stored_stats.EditPlan`: only the deleted / trimmed episodes are read).

An edit interrupted in this process — Ctrl-C (``KeyboardInterrupt``), the CLI's SIGTERM, or any error
raised mid-edit — is rolled back before the exception goes on (:meth:`EpisodeEditing._run_edit`): the
store is the pre-edit one again, attributes included, with no journal and no backups left, so a
read-only open works at once.  An interruption after the edit committed keeps the edited store (and
removes the leftovers).  Only a kill (SIGKILL, power loss) leaves the journal for the next writable
open to roll back.  A mixin: it uses the buffer's ``_store``, ``_ends``, ``_n_ep``, ``_mutex`` and
``_persist``."""

from __future__ import annotations

import copy
import numbers
from collections import Counter
from typing import Any

import numpy as np

from replaybuf_core.interrupts import deferred_sigint

from . import editing
from .buffer_checks import _check_index, _serialized
from .commit import read_generation
from .lossy_frames import EditReport, lossy_keys
from .progress import progress_bar
from .row_moves import moved_keys
from .versions import tags as _tags
from .source_records import drop_imported_stats
from .stored_stats import EditPlan


#: the groups whose attributes an edit changes (commit record, journal, statistics, source records)
_ATTR_GROUPS = ("data", "meta")


def _restore_attrs(store: Any, before: dict[str, dict]) -> None:
    """Set every attribute of the groups in ``before`` that changed since back to its value there
    (one ``set_attrs`` per group; an attribute added since becomes None, as backends cannot delete)."""
    for group, old in before.items():
        now = store.get_attrs(group)
        changed = {k: old.get(k) for k in old.keys() | now.keys() if now.get(k) != old.get(k)}
        if changed:
            store.set_attrs(group, changed)


class EpisodeEditing:
    """``ReplayBuffer``'s edit methods (see the class docstring there)."""

    def _after_edit(self) -> None:
        ends = self._store.read("meta", "episode_ends", 0, int(self._store.shape("meta", "episode_ends")[0]))
        self._ends = np.array(ends, dtype=np.int64)
        self._n_ep = int(self._ends.size)
        self._idx_cache = None
        # the edit recorded a version of what is there now: appends after it are a version of their own
        self._counts_at_open = (self._n_ep, int(self._ends[-1]) if self._n_ep else 0)

    def _run_edit(self, kind: str, ranges: list[tuple[int, int]] | None, kept: np.ndarray | None, deleted: np.ndarray,
                  trimmed: dict[int, tuple[int, int]], drop_stats: bool = True, progress: bool = False,
                  message: str | None = None, target: Any = None) -> EditReport:
        """Run a validated edit (``kind``: the verb): prepare the statistics' plan, drop the imported
        ``stats.json`` (unless ``drop_stats`` is False), rewrite, refresh the bookkeeping, update the
        statistics (lossy frame keys' from the rows the rewrite re-encoded).  Whatever interrupts it
        (``BaseException``) is re-raised after :meth:`_undo_interrupted_edit`.  ``progress``: a tqdm
        bar over the bytes the rewrite moves (:func:`~replaybuf_core.store.editing.rewrite`).
        ``message``: the version's message; ``target``: a restore's
        (:class:`~replaybuf_core.store.version_view.RestoreTarget`: the stored statistics are then
        forgotten, recomputed at the next ``get_stats``).

        Returns the :class:`~replaybuf_core.store.lossy_frames.EditReport`.

        Raises:
            InterruptedEditError: the edit was interrupted and undoing it failed too (chained).
        """
        store = self._store
        # (a deep copy: a backend may hand out its nested values, which the edit's steps change in place)
        before = {group: copy.deepcopy(store.get_attrs(group)) for group in _ATTR_GROUPS}
        generation = read_generation(store)
        counts = (self._n_ep, int(self._ends[self._n_ep - 1]) if self._n_ep else 0)
        try:
            moved = moved_keys(store, self.keys())  # moved as stored bytes: nothing re-encoded
            plan = EditPlan(self, deleted, trimmed, [k for k in lossy_keys(store, self.keys()) if k not in moved]) \
                if target is None else None
            if drop_stats:
                drop_imported_stats(store, kind)
            with progress_bar(kind, 0, progress) as bar:
                rewritten = editing.rewrite(self, ranges, kept, kind, bar, message=message, target=target)
            self._after_edit()
            if plan is not None:
                plan.rewritten = rewritten
                plan.apply()
            elif read_generation(store) != generation:  # a restore: the statistics are the next get_stats'
                editing.forget_lossy_stats(store, self.keys())
                self._persist()
            unplanned = [k for k, r in rewritten.items() if r.unplanned]
            if unplanned:  # re-encoded after all: not the pixels the statistics counted
                editing.forget_lossy_stats(store, unplanned)
                self._persist()
        except BaseException as exc:
            self._undo_interrupted_edit(kind, exc, before, generation)
            raise
        return EditReport(kind, (counts[0], self._n_ep), (counts[1], self.n_steps), rewritten)

    def _undo_interrupted_edit(self, kind: str, exc: BaseException, before: dict[str, dict], generation: int) -> None:
        """Clean up after ``exc`` interrupted an edit, with Ctrl-C held back meanwhile: if the edit had
        not committed (a journal, or the edit generation still ``generation``), roll it back
        (:func:`~replaybuf_core.store.editing.rollback`) and put the group attributes back to
        ``before``, else keep the edited store and delete the leftover backups; then refresh the
        bookkeeping.  Notes on ``exc`` what became of the edit.

        Raises:
            InterruptedEditError: the clean-up failed (chained to the failure, whose context is
            ``exc``); a journal it could not finish stays for the next writable open.
        """
        store = self._store
        journal = editing.pending(store)
        committed = journal is None and read_generation(store) != generation
        try:
            with deferred_sigint():  # a second Ctrl-C is raised once the store is whole again
                editing.rollback(store, apply=True)  # the journaled rows back; without a journal, the backups go
                if not committed:
                    _restore_attrs(store, before)
                if journal is not None:  # lossy frames written back: not the pixels the statistics counted
                    editing.forget_lossy_stats(store, list(journal.get("lossy", [])))
                self._persist()
                self._after_edit()
        except Exception as failure:
            raise editing.InterruptedEditError(
                f"{kind} was interrupted ({type(exc).__name__}: {exc}) and undoing it in this process failed "
                f"({type(failure).__name__}: {failure}): open the store writable, or run `replaybuf verify "
                "--repair PATH`, to roll it back") from failure
        exc.add_note(f"replaybuf: the interrupted {kind} "
                     + ("had committed: the store holds the edited episodes" if committed
                        else "was rolled back: the store is as before"))

    def _episode_numbers(self, indices: Any, what: str) -> np.ndarray:
        arr = np.asarray(indices)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.ndim != 1:
            raise ValueError(f"{what}: episode indices must be 1-D, got shape {arr.shape}")
        out = [_check_index(i, self._n_ep) for i in arr.tolist()]
        twice = sorted(i for i, n in Counter(out).items() if n > 1)
        if twice:
            raise ValueError(f"{what}: episodes {twice} are listed more than once")
        return np.asarray(sorted(out), dtype=np.int64)

    @_serialized
    def restore(self, version: Any, *, message: str | None = None, progress: bool = False) -> EditReport:
        """Make the store what it was at ``version`` (a tag, a version id, or a negative number
        counting back from the current version: :mod:`replaybuf_core.store.versions`).  The restore is
        an edit — crash-safe, frames moved as stored bytes — and a version of its own, so the state
        before it can be restored again.  Rewrites from the first row where the two versions differ.

        Returns an :class:`~replaybuf_core.store.lossy_frames.EditReport`.

        Raises:
            VersionNotFoundError (a KeyError): no such version (names the known ones and the tags), or
                one an edit after it kept no undo for (a backend without versions: zarr v2, HDF5).
            ValueError: the version's undo is not in this store (a copy without its versions group).
            ReadOnlyError, RuntimeError (a writer is open).  KeyboardInterrupt or an error raised
            mid-restore: re-raised once it is rolled back (see :meth:`delete_episodes`).
        """
        from .version_view import RestoreTarget
        from .versions import find, log, note_appends, require_kept

        self._require_writable()
        known = log(self._store)
        require_kept(known, find(self._store, version, known))  # validate before recording anything
        note_appends(self._store, self._n_ep, self.n_steps)  # what is there now is a version too
        self._persist()
        self._counts_at_open = (self._n_ep, self.n_steps)
        index = find(self._store, version)
        versions = log(self._store)
        missing = [f"versions/{v['undo']['prefix']}{k}" for v in versions[index:-1] if isinstance(v.get("undo"), dict)
                   for k in v["undo"]["starts"] if not self._store.has_array("versions", v["undo"]["prefix"] + k)]
        if missing:
            raise ValueError(f"restore: version {versions[index]['id']}'s undo is not in this store ({missing[:3]} "
                             "missing: a copy without its versions group?); nothing was changed")
        meta_names = ["episode_ends"] + editing.episode_meta_arrays(self._store, self._n_ep)
        target = RestoreTarget(self._store, index, self.keys(), meta_names)
        label = next((n for n, v in _tags(self._store).items() if v == int(versions[index]["id"])), None)
        msg = message or f"restore version {versions[index]['id']}" + (f" ({label})" if label else "")
        return self._run_edit("restore", None, None, np.zeros(0, np.int64), {}, progress=progress, message=msg,
                              target=target)

    @_serialized
    def delete_episodes(self, indices: Any, *, progress: bool = False, message: str | None = None) -> EditReport:
        """Delete the given episodes (any of them; negative indices count from the end).  The
        remaining episodes keep their order; per-episode meta arrays follow.  Crash-safe (the old
        or the new store survives a kill), rewriting only from the first deleted episode on.

        Returns an :class:`~replaybuf_core.store.lossy_frames.EditReport`: episodes and steps before
        and after, and per camera key with a lossy codec (JPEG, video) how many kept frames the edit
        re-encoded and their worst PSNR (deleting the last episodes re-encodes at most the kept frames
        of the chunk holding the new end).  The same for :meth:`keep_episodes` and :meth:`trim_episode`.
        ``progress``: a tqdm bar on stderr over the bytes the edit moves (all three).  ``message``:
        the edit's version message (all three; default a summary: :mod:`replaybuf_core.store.versions`).

        Raises:
            TypeError: a non-integer index.  IndexError: an index out of range (named).
            ValueError: an index listed twice, indices not 1-D.  ReadOnlyError, RuntimeError (a
            writer is open).
            KeyboardInterrupt or an error raised mid-edit: re-raised once the edit is rolled back (or,
            past its commit, finished; see the module docstring).  InterruptedEditError: that failed too.
        """
        self._require_writable()
        gone = self._episode_numbers(indices, "delete_episodes")
        keep = np.setdiff1d(np.arange(self._n_ep), gone)
        ranges, kept = editing.keep_ranges_for(self._ends[: self._n_ep], keep)
        return self._run_edit("delete_episodes", ranges, kept, gone, {}, progress=progress, message=message)

    @_serialized
    def keep_episodes(self, mask: Any, *, progress: bool = False, message: str | None = None) -> EditReport:
        """Keep only the episodes where ``mask`` is True: a bool array (n_episodes,), or the name of
        a bool meta array with one row per episode (e.g. a validation mask).  Crash-safe.

        Raises:
            TypeError: ``mask`` not bool.  ValueError: wrong length.  KeyError: no such meta array.
            KeyboardInterrupt or an error raised mid-edit: re-raised once the edit is rolled back (or,
            past its commit, finished; see the module docstring).  InterruptedEditError: that failed too.
        """
        self._require_writable()
        if isinstance(mask, str):
            if not self._store.has_array("meta", mask):
                raise KeyError(f"keep_episodes: no meta array {mask!r}; {self._mask_candidates()}")
            mask = self._store.read("meta", mask, 0, int(self._store.shape("meta", mask)[0]))
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"keep_episodes: mask must hold bool, got dtype {mask.dtype}")
        if mask.shape != (self._n_ep,):
            raise ValueError(f"keep_episodes: mask has shape {mask.shape}, the buffer has {self._n_ep} episodes")
        ranges, kept = editing.keep_ranges_for(self._ends[: self._n_ep], np.flatnonzero(mask))
        return self._run_edit("keep_episodes", ranges, kept, np.flatnonzero(~mask), {}, drop_stats=not mask.all(),
                              progress=progress, message=message)

    def _mask_candidates(self) -> str:
        """What a mask could be named: the bool meta arrays with one value per episode (the store's
        own bookkeeping — ``episode_ends``, ``_stats.*`` — left out), else the other user arrays."""
        s = self._store
        user = [n for n in s.list_arrays("meta") if n != "episode_ends" and not n.startswith("_")]
        masks = [n for n in user if tuple(s.shape("meta", n)) == (self._n_ep,) and np.dtype(s.dtype("meta", n)) == np.bool_]
        if masks:
            return f"the store's masks (bool meta arrays, one value per episode) are {masks}"
        others = f"; its meta arrays are {user}" if user else ""
        return f"the store has no mask (a bool meta array with one value per episode){others}"

    @_serialized
    def trim_episode(self, index: int, start: int = 0, stop: int | None = None, *, progress: bool = False,
                     message: str | None = None) -> EditReport:
        """Keep steps ``[start, stop)`` of episode ``index`` (drop idle frames at either end); ``stop``
        None keeps to the end.  Crash-safe; rewrites from that episode on.

        Raises:
            TypeError: non-integer arguments.  IndexError: ``index`` out of range.
            ValueError: not ``0 <= start < stop <= length`` (the message gives the episode's length).
            KeyboardInterrupt or an error raised mid-edit: re-raised once the edit is rolled back (or,
            past its commit, finished; see the module docstring).  InterruptedEditError: that failed too.
        """
        self._require_writable()
        i = _check_index(index, self._n_ep)
        length = int(self._ends[i] - (self._ends[i - 1] if i else 0))  # i < _n_ep
        stop = length if stop is None else stop
        for name, v in (("start", start), ("stop", stop)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"trim_episode: {name} must be an int, got {type(v).__name__} {v!r}")
        start, stop = int(start), int(stop)
        if not 0 <= start < stop <= length:
            raise ValueError(f"trim_episode: episode {i} has {length} steps; [start, stop) = [{start}, {stop}) must "
                             "satisfy 0 <= start < stop <= length (an episode keeps at least one step)")
        ranges, kept = editing.keep_ranges_for(self._ends[: self._n_ep], np.arange(self._n_ep), {i: (start, stop)})
        return self._run_edit("trim_episode", ranges, kept, np.zeros(0, dtype=np.int64), {i: (start, stop)},
                              progress=progress, message=message)
