"""The editing verbs of :class:`~replaybuf_core.ReplayBuffer`: delete any episodes, trim an episode's
ends, keep a subset.  Each validates everything first (a refused call changes nothing), then runs
the crash-safe rewrite of :mod:`replaybuf_core.store.editing`, and brings the stored statistics along
(:class:`~replaybuf_core.store.stored_stats.EditPlan`: only the deleted / trimmed episodes are read).  A mixin: it uses the buffer's ``_store``,
``_ends``, ``_n_ep``, ``_mutex`` and ``_persist``."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from . import editing
from .buffer_checks import _check_index, _serialized
from .source_records import drop_imported_stats
from .stored_stats import EditPlan


class EpisodeEditing:
    """``ReplayBuffer``'s edit methods (see the class docstring there)."""

    def _after_edit(self) -> None:
        ends = self._store.read("meta", "episode_ends", 0, int(self._store.shape("meta", "episode_ends")[0]))
        self._ends = np.array(ends, dtype=np.int64)
        self._n_ep = int(self._ends.size)
        self._idx_cache = None

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
    def delete_episodes(self, indices: Any) -> None:
        """Delete the given episodes (any of them; negative indices count from the end).  The
        remaining episodes keep their order; per-episode meta arrays follow.  Crash-safe (the old
        or the new store survives a kill), rewriting only from the first deleted episode on.

        Raises:
            TypeError: a non-integer index.  IndexError: an index out of range (named).
            ValueError: an index listed twice, indices not 1-D.  ReadOnlyError, RuntimeError (a
            writer is open).
        """
        self._require_writable()
        gone = self._episode_numbers(indices, "delete_episodes")
        keep = np.setdiff1d(np.arange(self._n_ep), gone)
        ranges, kept = editing.keep_ranges_for(self._ends[: self._n_ep], keep)
        plan = EditPlan(self, gone, {})
        drop_imported_stats(self._store, "delete_episodes")
        editing.rewrite(self, ranges, kept, "delete_episodes")
        self._after_edit()
        plan.apply()

    @_serialized
    def keep_episodes(self, mask: Any) -> None:
        """Keep only the episodes where ``mask`` is True: a bool array (n_episodes,), or the name of
        a bool meta array with one row per episode (e.g. a validation mask).  Crash-safe.

        Raises:
            TypeError: ``mask`` not bool.  ValueError: wrong length.  KeyError: no such meta array.
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
        plan = EditPlan(self, np.flatnonzero(~mask), {})
        if not mask.all():
            drop_imported_stats(self._store, "keep_episodes")
        editing.rewrite(self, ranges, kept, "keep_episodes")
        self._after_edit()
        plan.apply()

    @_serialized
    def trim_episode(self, index: int, start: int = 0, stop: int | None = None) -> None:
        """Keep steps ``[start, stop)`` of episode ``index`` (drop idle frames at either end); ``stop``
        None keeps to the end.  Crash-safe; rewrites from that episode on.

        Raises:
            TypeError: non-integer arguments.  IndexError: ``index`` out of range.
            ValueError: not ``0 <= start < stop <= length`` (the message gives the episode's length).
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
        plan = EditPlan(self, np.zeros(0, dtype=np.int64), {i: (start, stop)})
        drop_imported_stats(self._store, "trim_episode")
        editing.rewrite(self, ranges, kept, "trim_episode")
        self._after_edit()
        plan.apply()
