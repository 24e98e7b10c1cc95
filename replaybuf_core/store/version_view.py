"""Reading an older version of a store, and restoring one (see :mod:`.versions` for how versions are
kept).

:class:`VersionView` is a read-only :class:`~replaybuf_core.protocol.StorageBackend` over a store that
presents version ``i``: each data key's rows are *layers* — a row at or past an undo's start (walking
the versions after ``i``, the lowest start so far) is that undo's, the rows below the lowest start are
the current array's — and each per-episode meta array is the first undo's copy of it found on that
walk, else the current one, cut to version ``i``'s episodes.  ``ReplayBuffer(path, version=...)``
opens through it (read-only); samplers and torch datasets given that buffer read the version.

While it is open, the view holds the version (:mod:`.version_readers`): ``gc`` refuses to delete an
undo it reads.  An edit of the store while it is open changes the current rows it reads for the
layers below every undo (as for any reader of a store being edited: edits need the store to
themselves).

:class:`RestoreTarget` is what :func:`~replaybuf_core.store.editing.rewrite` makes the store for a
restore: version ``i``'s rows and meta, from the first row where it differs from the current store.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.protocol import VERSIONS_GROUP, read_rows_via_ranges

from .commit import COMMIT_RECORD, EPISODE_ENDS
from .versions import log

__all__ = ["RestoreTarget", "VersionView", "data_layers"]

#: meta attributes a version view does not show (they describe the current version)
_HIDDEN_ATTRS = ("replaybuf_stats", "replaybuf_edit")


def data_layers(versions: list[dict], i: int, key: str) -> list[tuple[int, int, str, str, int]]:
    """Where the rows of data key ``key`` at version index ``i`` of ``versions`` (a :func:`log`) are:
    ``(lo, hi, group, array, offset)`` for rows ``[lo, hi)``, read at ``row - offset``, in row order."""
    lim = int(versions[i]["n_steps"])
    out = []
    for k in range(i, len(versions) - 1):
        undo = versions[k].get("undo")
        start = undo["starts"].get(key) if isinstance(undo, dict) else None
        if start is not None and int(start) < lim:
            out.append((int(start), lim, VERSIONS_GROUP, undo["prefix"] + key, int(start)))
            lim = int(start)
    out.append((0, lim, "data", key, 0))
    return sorted(out)


def meta_source(store: Any, versions: list[dict], i: int, name: str) -> tuple[str, str, bool]:
    """``(group, array, per_episode)``: where meta array ``name`` at version index ``i`` is read from;
    ``per_episode`` when only its first ``n_episodes`` rows belong to the version."""
    for k in range(i, len(versions) - 1):
        undo = versions[k].get("undo")
        if isinstance(undo, dict) and name in undo.get("meta", []):
            return VERSIONS_GROUP, undo["meta_prefix"] + name, True
    # the store's episodes now: the last version's, or more when appends committed since were not
    # recorded yet (a recording killed before its close records them)
    n_now = int(store.shape("meta", "episode_ends")[0]) if store.has_array("meta", "episode_ends") \
        else int(versions[-1]["n_episodes"])
    shape = tuple(store.shape("meta", name))
    return "meta", name, bool(shape) and shape[0] == n_now


class _ViewArray:
    """What ``get_array`` hands out for a version's array: shape, dtype and NumPy indexing (rows read
    through the view)."""

    def __init__(self, view: VersionView, group: str, name: str):
        self._view, self._group, self._name = view, group, name
        self.shape = tuple(view.shape(group, name))
        self.dtype = np.dtype(view.dtype(group, name))
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def __array__(self, dtype=None, copy=None):
        out = self._view.read(self._group, self._name, 0, len(self)) if self.shape else \
            self._view.read(self._group, self._name, 0, 0)
        return out.astype(dtype) if dtype is not None else out

    def __getitem__(self, key: Any) -> Any:
        return np.asarray(self)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ReadOnlyError(f"{self._group}/{self._name} belongs to an older version, opened read-only")


class VersionView:
    """Version index ``index`` of ``store`` (a :func:`~replaybuf_core.store.versions.log` index), read
    only (see the module docstring).  ``hold``: an object whose ``release()`` ends this reader's hold
    of the version (``close`` calls it, and so does the view's garbage collection: a reader dropped
    without ``close`` does not hold its version until the process ends).  ``versions``: the log
    ``index`` was found in (default: the store's log now; ``gc`` may have shortened it since)."""

    read_only = True

    def __init__(self, store: Any, index: int, hold: Any = None, versions: list[dict] | None = None):
        self._inner = store
        self._versions = log(store) if versions is None else [dict(v) for v in versions]
        self._i = int(index)
        self.version = dict(self._versions[self._i])
        self._hold = weakref.finalize(self, hold.release) if hold is not None else None
        self._layers: dict[str, list] = {}
        self._meta: dict[str, tuple[str, str, bool]] = {}
        self._pinned: dict[tuple[str, str], np.ndarray] = {}
        self.name = store.name
        self.capabilities = frozenset(c for c in store.capabilities if c not in ("batched_read", "rows_at", "rows_convert"))

    # -- what is passed through ------------------------------------------------------------------
    @property
    def inner(self) -> Any:
        return self._inner

    @property
    def root(self) -> Any:
        return self._inner.root

    def native_group(self, group: str) -> Any:
        return self._inner.native_group(group)

    def has_group(self, group: str) -> bool:
        return self._inner.has_group(group)

    def lock_path(self) -> Any:
        lock_path = getattr(self._inner, "lock_path", None)
        return lock_path() if callable(lock_path) else None

    def location(self) -> None:
        """None: another process opening the store's path would read the current version."""
        return None

    def flush(self) -> None:
        pass

    def close(self) -> None:
        try:
            if self._hold is not None:
                self._hold()  # (a weakref.finalize: runs the release once)
        finally:
            self._inner.close()

    def chunks(self, group: str, name: str):
        return self._inner.chunks(group, name)

    def shards(self, group: str, name: str):
        return self._inner.shards(group, name)

    def codec(self, group: str, name: str):
        return self._inner.codec(group, name)

    def dtype(self, group: str, name: str) -> np.dtype:
        return self._inner.dtype(group, name)

    # -- the version -------------------------------------------------------------------------------
    def _data(self, key: str) -> list:
        if key not in self._layers:
            self._layers[key] = data_layers(self._versions, self._i, key)
        return self._layers[key]

    def _meta_of(self, name: str) -> tuple[str, str, bool]:
        if name not in self._meta:
            self._meta[name] = meta_source(self._inner, self._versions, self._i, name)
        return self._meta[name]

    def list_arrays(self, group: str) -> list[str]:
        names = self._inner.list_arrays(group)
        return [n for n in names if not n.startswith("_stats.")] if group == "meta" else names

    def has_array(self, group: str, name: str) -> bool:
        return name in self.list_arrays(group)

    def get_array(self, group: str, name: str) -> Any:
        if not self.has_array(group, name):
            raise KeyError(f"no array {group}/{name}")
        return _ViewArray(self, group, name)

    def shape(self, group: str, name: str) -> tuple[int, ...]:
        shape = tuple(self._inner.shape(group, name))
        if group == "data":
            return (int(self.version["n_steps"]),) + shape[1:]
        if group == "meta":
            g, n, per_episode = self._meta_of(name)
            shape = tuple(self._inner.shape(g, n))
            return (int(self.version["n_episodes"]),) + shape[1:] if per_episode else shape
        return shape

    def get_attrs(self, group: str) -> dict:
        attrs = {k: v for k, v in self._inner.get_attrs(group).items() if k not in _HIDDEN_ATTRS}
        if group == "meta":
            attrs[COMMIT_RECORD] = {"n_episodes": int(self.version["n_episodes"]),
                                    "n_steps": int(self.version["n_steps"]), "generation": -1}
        return attrs

    def read(self, group: str, name: str, start: int, stop: int, step: int | None = None) -> np.ndarray:
        if step not in (None, 1):
            return self.read(group, name, start, stop)[::step]
        n = self.shape(group, name)[0] if self.shape(group, name) else 0
        start, stop = max(0, int(start)), min(int(stop), n)
        stop = max(start, stop)
        if group == "meta":
            g, arr, _ = self._meta_of(name)
            return self._inner.read(g, arr, start, stop)
        if group != "data":
            return self._inner.read(group, name, start, stop)
        parts = []
        for lo, hi, g, arr, off in self._data(name):
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                parts.append(np.asarray(self._inner.read(g, arr, a - off, b - off)))
        if not parts:
            return np.asarray(self._inner.read(group, name, 0, 0))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def read_ranges(self, group: str, name: str, starts: Sequence[int], stops: Sequence[int]) -> list[np.ndarray]:
        return [self.read(group, name, a, b) for a, b in zip(starts, stops)]

    def read_rows(self, group: str, name: str, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        n = self.shape(group, name)[0]
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n):
            raise IndexError(f"rows out of range for {group}/{name} of {n} rows at version {self.version['id']}")
        if group != "data":
            return read_rows_via_ranges(self, group, name, rows, out)
        flat_rows, flat_out = rows.reshape(-1), out.reshape((-1,) + out.shape[rows.ndim:])
        reader = getattr(self._inner, "read_rows", None)
        for lo, hi, g, arr, off in self._data(name):
            sel = np.flatnonzero((flat_rows >= lo) & (flat_rows < hi))
            if not sel.size:
                continue
            if int(sel[-1]) - int(sel[0]) + 1 == sel.size and flat_out.flags.c_contiguous:
                a, b = int(sel[0]), int(sel[-1]) + 1  # a run of the rows (sorted rows): read in place
                if reader is not None:
                    reader(g, arr, flat_rows[a:b] - off, flat_out[a:b])
                else:
                    read_rows_via_ranges(self._inner, g, arr, flat_rows[a:b] - off, flat_out[a:b])
                continue
            part = np.empty((sel.size,) + flat_out.shape[1:], dtype=flat_out.dtype)
            if reader is not None:
                reader(g, arr, flat_rows[sel] - off, part)
            else:
                read_rows_via_ranges(self._inner, g, arr, flat_rows[sel] - off, part)
            flat_out[sel] = part
        return out

    def pin(self, group: str, name: str) -> bool:
        self._pinned[(group, name)] = self.read(group, name, 0, self.shape(group, name)[0])
        self._pinned[(group, name)].flags.writeable = False
        return True

    def pinned(self, group: str, name: str) -> np.ndarray | None:
        return self._pinned.get((group, name))

    def __getattr__(self, attr: str) -> Any:
        if attr in ("cache_bytes", "cache", "image_codec", "accepts_codec", "codecs_equal", "stored_bytes"):
            return getattr(self._inner, attr)
        if attr.startswith(("write", "create", "delete", "rename", "resize", "set_", "splice", "copy")):
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise ReadOnlyError(f"version {self.version['id']} is open read-only (an older version of the store)")
            return refuse
        raise AttributeError(attr)


class RestoreTarget:
    """The store as version index ``index`` of its log: what
    :func:`~replaybuf_core.store.editing.rewrite` makes of it for ``restore`` (the interface of
    :class:`~replaybuf_core.store.editing.Target`).  Read before anything changes: the meta rows in
    memory, the data rows' layers (the current rows among them lie below every key's first changed
    row, so the rewrite never reads a row it has overwritten)."""

    def __init__(self, store: Any, index: int, keys: list[str], meta_names: list[str]):
        view = VersionView(store, index)
        versions = log(store)
        self.ends = np.asarray(view.read("meta", EPISODE_ENDS, 0, int(versions[index]["n_episodes"])), np.int64)
        self._layers = {k: data_layers(versions, index, k) for k in keys}
        now = int(versions[-1]["n_steps"])
        # the first row of each key that differs: below the lowest undo start (rows there are
        # the current ones) and within both versions
        self._first = {k: min(self._layers[k][0][1] if self._layers[k][0][2] == "data" else 0, now)
                       for k in keys}
        self._meta = {m: np.asarray(view.read("meta", m, 0, view.shape("meta", m)[0])) for m in meta_names
                      if m != EPISODE_ENDS and view.has_array("meta", m)}
        same_meta = all(np.array_equal(v, np.asarray(store.read("meta", m, 0, store.shape("meta", m)[0])))
                        for m, v in self._meta.items())
        cur_ends = np.asarray(store.read("meta", EPISODE_ENDS, 0, store.shape("meta", EPISODE_ENDS)[0]))
        self.unchanged = (np.array_equal(cur_ends, self.ends) and same_meta
                          and all(f >= self.n_steps for f in self._first.values()))

    @property
    def n_steps(self) -> int:
        return int(self.ends[-1]) if self.ends.size else 0

    def first(self, key: str) -> int:
        return self._first[key]

    def runs(self, key: str, s0: int, backup: str) -> list[tuple[str, int, int]]:
        """New rows ``[s0, n_steps)``: the current rows ``[s0, first)`` (now in ``backup``, whose row
        0 is row ``s0``), then the version's rows from its undos (same group as ``backup``)."""
        first = self._first[key]
        out = [(backup, 0, first - s0)] if first > s0 else []
        for lo, hi, group, arr, off in self._layers[key]:
            a, b = max(lo, first), hi
            if a < b:
                if group == "data":  # (below ``first`` by construction)
                    raise AssertionError(f"restore: rows {a}..{b} of {key} would be read while rewritten")
                out.append((arr, a - off, b - off))
        return out

    def meta(self, name: str, backup: tuple[str, str], store: Any, n_old: int) -> np.ndarray:
        if name in self._meta:
            return self._meta[name]
        return np.asarray(store.read(backup[0], backup[1], 0, n_old))[: self.ends.size]
