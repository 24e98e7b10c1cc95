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
from typing import Any

import numpy as np

from . import editing
from .buffer_checks import _check_index, _serialized
from .commit import read_generation
from .interrupts import deferred_sigint
from .lossy_frames import EditReport, lossy_keys
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

    def _run_edit(self, kind: str, ranges: list[tuple[int, int]], kept: np.ndarray, deleted: np.ndarray,
                  trimmed: dict[int, tuple[int, int]], drop_stats: bool = True) -> EditReport:
        """Run a validated edit (``kind``: the verb): prepare the statistics' plan, drop the imported
        ``stats.json`` (unless ``drop_stats`` is False), rewrite, refresh the bookkeeping, update the
        statistics (lossy frame keys' from the rows the rewrite re-encoded).  Whatever interrupts it
        (``BaseException``) is re-raised after :meth:`_undo_interrupted_edit`.

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
            plan = EditPlan(self, deleted, trimmed, lossy_keys(store, self.keys()))
            if drop_stats:
                drop_imported_stats(store, kind)
            plan.rewritten = rewritten = editing.rewrite(self, ranges, kept, kind)
            self._after_edit()
            plan.apply()
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
        twice = sorted({i for i in out if out.count(i) > 1})
        if twice:
            raise ValueError(f"{what}: episodes {twice} are listed more than once")
        return np.asarray(sorted(out), dtype=np.int64)

    @_serialized
    def delete_episodes(self, indices: Any) -> EditReport:
        """Delete the given episodes (any of them; negative indices count from the end).  The
        remaining episodes keep their order; per-episode meta arrays follow.  Crash-safe (the old
        or the new store survives a kill), rewriting only from the first deleted episode on.

        Returns an :class:`~replaybuf_core.store.lossy_frames.EditReport`: episodes and steps before
        and after, and per camera key with a lossy codec (JPEG, video) how many kept frames the edit
        re-encoded and their worst PSNR (deleting the last episodes re-encodes at most the kept frames
        of the chunk holding the new end).  The same for :meth:`keep_episodes` and :meth:`trim_episode`.

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
        return self._run_edit("delete_episodes", ranges, kept, gone, {})

    @_serialized
    def keep_episodes(self, mask: Any) -> EditReport:
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
                raise KeyError(f"keep_episodes: no meta array {mask!r} (meta arrays: {self._store.list_arrays('meta')})")
            mask = self._store.read("meta", mask, 0, int(self._store.shape("meta", mask)[0]))
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"keep_episodes: mask must hold bool, got dtype {mask.dtype}")
        if mask.shape != (self._n_ep,):
            raise ValueError(f"keep_episodes: mask has shape {mask.shape}, the buffer has {self._n_ep} episodes")
        ranges, kept = editing.keep_ranges_for(self._ends[: self._n_ep], np.flatnonzero(mask))
        return self._run_edit("keep_episodes", ranges, kept, np.flatnonzero(~mask), {}, drop_stats=not mask.all())

    @_serialized
    def trim_episode(self, index: int, start: int = 0, stop: int | None = None) -> EditReport:
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
        return self._run_edit("trim_episode", ranges, kept, np.zeros(0, dtype=np.int64), {i: (start, stop)})
