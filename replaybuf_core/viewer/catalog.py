"""The viewer's episode list: one row per episode (index, first row, length, duration, task, the
per-episode meta arrays), filtered and cut into pages.

Built for big stores: opening reads ``meta/episode_ends`` and the *numeric and bool* per-episode meta
arrays (a few bytes an episode: 100k episodes in milliseconds); string and JSON meta
(``episode_attrs``, a LeRobot import's per-episode statistics among them) is read only for the rows
of the page shown — or, once, in full, when a text filter has to search the tasks.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np

from replaybuf_core.store.commit import EPISODE_ENDS

#: meta arrays named ``mask.<name>``: one bool an episode (robomimic's filters, the viewer's marks)
MASK_PREFIX = "mask."
#: the most rows one page may ask for
MAX_PAGE = 500
#: a string meta value longer than this is shortened in the list (the episode page shows it whole)
LIST_TEXT_CHARS = 80


def _as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def task_of(attrs_text: str) -> str | None:
    """The task(s) in one ``episode_attrs`` JSON string (a LeRobot import's ``tasks`` list, or a
    ``task`` string), joined with ``"; "``; None when it has none or is not JSON."""
    try:
        attrs = json.loads(attrs_text)
    except (TypeError, ValueError):
        return None
    if not isinstance(attrs, dict):
        return None
    tasks = attrs.get("tasks", attrs.get("task"))
    if isinstance(tasks, str):
        return tasks
    if isinstance(tasks, list) and tasks:
        return "; ".join(str(t) for t in tasks)
    return None


class EpisodeCatalog:
    """The episodes of one opened buffer as list rows.

    Attributes:
        lengths: int64 (n_episodes,) steps per episode; ``starts`` the first row of each.
        fps: frames per second from the data attributes (``fps``), or None (durations are then None).
        numeric: name → (n_episodes,) array of every numeric or bool 1-D per-episode meta array.
        text_names: names of the string / JSON per-episode meta arrays (read per page).
    """

    def __init__(self, rb: Any):
        self._rb = rb
        self._lock = threading.Lock()
        ends = np.asarray(rb.episode_ends, dtype=np.int64)
        self.lengths = np.diff(ends, prepend=0)
        self.starts = ends - self.lengths
        attrs = rb.store.get_attrs("data") or {}
        fps = attrs.get("fps")
        self.fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
        self.numeric: dict[str, np.ndarray] = {}
        self.text_names: list[str] = []
        n = self.lengths.size
        s = rb.store
        for name in s.list_arrays("meta"):
            if name == EPISODE_ENDS or name.startswith("_") or tuple(s.shape("meta", name)) != (n,):
                continue
            dtype = np.dtype(s.dtype("meta", name))
            if dtype.kind in "biuf":
                self.numeric[name] = np.asarray(s.read("meta", name, 0, n)) if n else np.zeros(0, dtype)
            elif dtype.kind in "OUS":
                self.text_names.append(name)
        self._tasks: np.ndarray | None = None  # every episode's task, read on the first text filter

    @property
    def n_episodes(self) -> int:
        return int(self.lengths.size)

    @property
    def masks(self) -> list[str]:
        """The mask names (``meta/mask.<name>`` holding bool): ``[<name>, ...]``."""
        return [k[len(MASK_PREFIX):] for k, v in self.numeric.items()
                if k.startswith(MASK_PREFIX) and v.dtype == np.bool_]

    def set_mask(self, name: str, values: np.ndarray) -> None:
        """Record a mask saved by :mod:`.marking` (so the list shows it without reopening)."""
        with self._lock:
            self.numeric[MASK_PREFIX + name] = np.asarray(values, dtype=bool)

    def _text_rows(self, name: str, idx: np.ndarray) -> list[str]:
        if idx.size == 0:
            return []
        lo, hi = int(idx.min()), int(idx.max()) + 1
        read = self._rb.store.read
        if hi - lo > 4 * idx.size + 64:  # far apart (a filtered page): one row each
            return [_as_text(np.asarray(read("meta", name, i, i + 1), dtype=object)[0]) for i in idx.tolist()]
        block = np.asarray(read("meta", name, lo, hi), dtype=object)
        return [_as_text(block[i - lo]) for i in idx.tolist()]

    def _task_rows(self, idx: np.ndarray) -> list[str | None]:
        if "task" in self.text_names:
            return list(self._text_rows("task", idx))
        if "episode_attrs" in self.text_names:
            return [task_of(t) for t in self._text_rows("episode_attrs", idx)]
        return [None] * idx.size

    def all_tasks(self) -> np.ndarray:
        """Every episode's task (object array of str or None), read once and kept."""
        with self._lock:
            if self._tasks is None:
                tasks = np.empty(self.n_episodes, dtype=object)
                step = 4096  # read in blocks: a LeRobot import's attrs carry per-episode statistics
                for lo in range(0, self.n_episodes, step):
                    idx = np.arange(lo, min(lo + step, self.n_episodes))
                    tasks[lo:lo + idx.size] = self._task_rows(idx)
                self._tasks = tasks
            return self._tasks

    def select(self, *, min_length: int | None = None, max_length: int | None = None,
               text: str | None = None, mask: str | None = None, marked: bool | None = None) -> np.ndarray:
        """Indices (int64, ascending) of the episodes that pass every filter given: length in
        ``[min_length, max_length]``; ``text`` (case-insensitive) in the task or equal to the
        episode's index; ``meta/mask.<mask>`` equal to ``marked`` (True when ``marked`` is None).

        Raises KeyError naming an unknown mask (and the masks there are)."""
        keep = np.ones(self.n_episodes, dtype=bool)
        if min_length is not None:
            keep &= self.lengths >= int(min_length)
        if max_length is not None:
            keep &= self.lengths <= int(max_length)
        if mask:
            values = self.numeric.get(MASK_PREFIX + mask)
            if values is None or values.dtype != np.bool_:
                raise KeyError(f"no mask {mask!r} (meta/{MASK_PREFIX}{mask}); masks: {self.masks}")
            keep &= values == (True if marked is None else bool(marked))
        if text and text.strip():
            needle = text.strip().lower()
            tasks = self.all_tasks()
            hit = np.fromiter((t is not None and needle in t.lower() for t in tasks), bool, self.n_episodes)
            if needle.isascii() and needle.isdigit() and int(needle) < self.n_episodes:
                hit[int(needle)] = True
            keep &= hit
        return np.flatnonzero(keep).astype(np.int64)

    def rows(self, idx: np.ndarray) -> list[dict[str, Any]]:
        """List rows of episodes ``idx``: ``{"index", "start", "length", "duration" (s or None),
        "task", "meta": {name: value}}`` (strings cut at :data:`LIST_TEXT_CHARS`; ``episode_attrs``,
        shown on the episode page, is left out)."""
        idx = np.asarray(idx, dtype=np.int64)
        tasks = self._task_rows(idx)
        text = {name: self._text_rows(name, idx) for name in self.text_names
                if name not in ("episode_attrs", "task")}
        out = []
        for j, i in enumerate(idx.tolist()):
            meta: dict[str, Any] = {name: values[i].item() for name, values in self.numeric.items()}
            for name, values in text.items():
                v = values[j]
                meta[name] = v if len(v) <= LIST_TEXT_CHARS else v[:LIST_TEXT_CHARS - 1] + "…"
            length = int(self.lengths[i])
            out.append({"index": i, "start": int(self.starts[i]), "length": length,
                        "duration": round(length / self.fps, 3) if self.fps else None,
                        "task": tasks[j], "meta": meta})
        return out

    def page(self, offset: int = 0, limit: int = 50, **filters: Any) -> dict[str, Any]:
        """One page of the filtered list: ``{"total" (episodes in the store), "matched", "offset",
        "limit", "episodes": rows}``; ``filters`` as for :meth:`select`.

        Raises ValueError for a negative offset or a limit outside ``[1, MAX_PAGE]``, KeyError for
        an unknown mask."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be in [1, {MAX_PAGE}], got {limit}")
        chosen = self.select(**filters)
        shown = chosen[offset:offset + limit]
        return {"total": self.n_episodes, "matched": int(chosen.size), "offset": offset, "limit": limit,
                "episodes": self.rows(shown)}
