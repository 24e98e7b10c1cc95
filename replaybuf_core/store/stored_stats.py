"""Stored statistics: per-key :class:`~replaybuf_core.stats.summaries.KeySummary` kept in the store, brought
up to date per committed episode, followed through edits, and checked by ``replaybuf verify``.

**Layout (version 1).**  The ``meta`` attribute ``replaybuf_stats`` holds
``{"version": 1, "keys": {key: entry}}``; an entry gives the key's ``kind`` (``"values"`` /
``"frames"``), ``exact``, step ``shape``, the episodes covered ``n_episodes`` (a prefix of the
store's), the ``rows`` in use of each array (arrays grow geometrically; rows past those are unused), ``ends_sha256`` (SHA-256 of ``episode_ends[:n_episodes]`` as little-endian int64) and
``sha256`` (of the stored summary, below).  The summary lives in meta arrays under the reserved
prefix ``_stats.``:

* ``_stats.<key>.moments`` float64 (n_episodes, 4, n_columns): per episode mean, M2 (sum of squared
  deviations), min, max of each column of the flattened step (numeric keys);
* ``_stats.<key>.sketch`` int64 (n_buckets, 2): the quantile sketch's keys and counts (numeric keys);
* ``_stats.<key>.hist`` int64 (C, 256): per-channel value counts (camera frames).

**Trust.**  An entry is used only when its layout matches the key, it was saved at the store's
current edit ``generation`` (:mod:`replaybuf_core.store.commit`: an edit killed between its commit and
its statistics update leaves entries of the generation before, never used again — the episode
lengths alone could match again after an append), its ``n_episodes`` is at most the
store's, ``episode_ends`` still starts with the covered ends (the digest) and the arrays hash to
``sha256``; otherwise it is ignored and the key is summarised from scratch.  Statistics are derived
data: the worst an interrupted save or a foreign edit can do is cost a recomputation.  Saves write
the arrays first and the attribute last (one object), so a kill leaves the old entry (valid when
only rows past its coverage were written) or the new one.

**Edits.**  Entries behind the store when an edit starts are forgotten first (an edit can leave the
covered ``episode_ends`` reading the same, e.g. deleting one of several equal-length episodes).

**Up to date.**  :func:`stats_of` merges the episodes committed since the entry was saved (reading
only them) and, on a writable store, saves the result: the cost of an update is in proportion to
the new episodes.  Edits (:mod:`replaybuf_core.store.buffer_editing`) drop deleted episodes' rows and
subtract their sketch counts, and re-summarise a trimmed episode, reading only those episodes.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from replaybuf_core.stats.summaries import FRAMES, KeySummary, stats_keys, stored_dtype, summarize

from .commit import read_generation
from .editing import STATS_PREFIX as PREFIX
from .editing import STATS_RECORD as RECORD
from .lossy_frames import frame_histogram

__all__ = ["RECORD", "PREFIX", "VERSION", "stats_of", "EditPlan", "check_stored_stats", "rehistogram"]

VERSION = 1
#: when an edit deletes more steps than this fraction, the kept steps are summarised afresh instead
REBUILD_FRACTION = 0.5


def _ends_digest(ends: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ends, dtype="<i8").tobytes()).hexdigest()


def _summary_arrays(key: str, s: KeySummary) -> dict[str, np.ndarray]:
    if s.kind == FRAMES:
        return {f"{PREFIX}{key}.hist": np.ascontiguousarray(s.hist, dtype=np.int64)}
    moments = np.stack([s.mean, s.m2, s.min, s.max], axis=1) if s.n_episodes else \
        np.zeros((0, 4, s.mean.shape[1]))
    return {f"{PREFIX}{key}.moments": np.ascontiguousarray(moments, dtype=np.float64),
            f"{PREFIX}{key}.sketch": np.stack([s.sketch.keys, s.sketch.counts], axis=1).astype(np.int64)}


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = arrays[name]
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _entry(key: str, s: KeySummary, ends: np.ndarray, generation: int = 0) -> dict:
    arrays = _summary_arrays(key, s)
    return {"kind": s.kind, "exact": s.exact, "shape": list(s.shape), "n_episodes": s.n_episodes,
            "generation": int(generation),
            "rows": {name[len(PREFIX) + len(key) + 1:]: int(a.shape[0]) for name, a in arrays.items()},
            "ends_sha256": _ends_digest(ends[: s.n_episodes]), "sha256": _digest(arrays)}


def _record(store: Any) -> dict:
    rec = store.get_attrs("meta").get(RECORD)
    return rec if isinstance(rec, dict) and rec.get("version") == VERSION and isinstance(rec.get("keys"), dict) \
        else {"version": VERSION, "keys": {}}


def _load(buffer: Any, key: str, entry: Any, ends: np.ndarray) -> tuple[KeySummary | None, str]:
    """The stored summary of ``key`` if ``entry`` can be trusted (see the module docstring), else
    ``(None, why)``."""
    store = buffer.store
    arr = buffer[key]
    fresh = KeySummary.for_array(stored_dtype(buffer, key, arr), tuple(arr.shape))
    if not isinstance(entry, dict):
        return None, "no stored statistics"
    if (entry.get("kind"), entry.get("exact"), entry.get("shape")) != (fresh.kind, fresh.exact, list(fresh.shape)):
        return None, "stored for another dtype or step shape"
    if entry.get("generation", 0) != read_generation(store):
        return None, ("stored before the last edit was committed (the edit's statistics update did not finish)")
    e = entry.get("n_episodes")
    if not isinstance(e, int) or not 0 <= e <= ends.size:
        return None, f"stored for {e} episodes, the store has {ends.size}"
    if entry.get("ends_sha256") != _ends_digest(ends[:e]):
        return None, "stored for other episodes (episode_ends changed since)"
    names = list(_summary_arrays(key, fresh))
    rows = entry.get("rows")
    if not isinstance(rows, dict):
        return None, "the entry gives no row counts"
    arrays = {}
    for name in names:
        n = rows.get(name[len(PREFIX) + len(key) + 1:])
        if not store.has_array("meta", name):
            return None, f"meta/{name} is missing"
        shape = tuple(store.shape("meta", name))
        if not isinstance(n, int) or not shape or not 0 <= n <= shape[0]:
            return None, f"meta/{name} has shape {shape}, the entry gives {n} rows"
        arrays[name] = np.asarray(store.read("meta", name, 0, n))
    if _digest(arrays) != entry.get("sha256"):
        return None, "the stored arrays do not hash to the recorded sha256 (damaged, or an interrupted save)"
    fresh.lengths = np.diff(np.r_[0, ends[:e]]).astype(np.int64)
    if fresh.kind == FRAMES:
        fresh.hist = arrays[names[0]].astype(np.int64)
        if fresh.hist.shape != (fresh.shape[-1], 256):
            return None, f"meta/{names[0]} has shape {fresh.hist.shape}"
        return fresh, ""
    m, sk = arrays[names[0]], arrays[names[1]]
    if m.shape != (e, 4, fresh.mean.shape[1]) or sk.ndim != 2 or sk.shape[1] != 2:
        return None, "the stored arrays have other shapes than the key's"
    fresh.mean, fresh.m2, fresh.min, fresh.max = (np.ascontiguousarray(m[:, i]) for i in range(4))
    fresh.sketch.keys, fresh.sketch.counts = sk[:, 0].copy(), sk[:, 1].copy()
    return fresh, ""


def _save(buffer: Any, summaries: dict[str, KeySummary], ends: np.ndarray, appended_from: dict[str, int]) -> None:
    """Write ``summaries`` (all covering ``ends``) and their entries; rows of a ``.moments`` array
    before ``appended_from[key]`` are known to be stored already.  Arrays grow geometrically (the
    entry gives the rows in use), so an update of a few episodes writes a few rows and resizes
    rarely."""
    store = buffer.store
    rec = _record(store)
    for key, s in summaries.items():
        for name, a in _summary_arrays(key, s).items():
            start = appended_from.get(key, 0) if name.endswith(".moments") else 0
            if store.has_array("meta", name) and (np.dtype(store.dtype("meta", name)) != a.dtype or
                                                  tuple(store.shape("meta", name))[1:] != a.shape[1:]):
                store.delete_array("meta", name)
            if not store.has_array("meta", name):
                store.create_array("meta", name, shape=a.shape, dtype=a.dtype)
                start = 0
            else:
                have = int(store.shape("meta", name)[0])
                if have < a.shape[0]:
                    store.resize("meta", name, max(a.shape[0], 2 * have))
                elif have > a.shape[0] and start == 0 and name.endswith(".moments"):
                    # fewer episodes after an edit: the deleted episodes' rows go (not kept as unused
                    # rows past those in use); the other arrays are rewritten whole and keep their room
                    store.resize("meta", name, a.shape[0])
            if a.shape[0] > start:
                store.write("meta", name, start, a[start:])
        rec["keys"][key] = _entry(key, s, ends, read_generation(store))
    buffer._persist()
    store.set_attrs("meta", {RECORD: rec})
    buffer._persist()


def stats_of(buffer: Any, keys: Sequence[str] | None = None, recompute: bool = False,
             summarizer: Any = None) -> dict[str, KeySummary]:
    """Up-to-date summaries of ``keys`` (default: every numeric / bool key): the stored ones with the
    episodes committed since merged in, the others computed; saved back when the buffer is writable.
    ``recompute`` ignores what is stored (after ``verify`` found stored statistics that disagree with
    data changed behind replaybuf's back).  ``summarizer(buffer, keys, first, stop)`` summarises the
    episodes to read (default :func:`~replaybuf_core.stats.summaries.summarize`).

    Raises:
        KeyError: a key not in the buffer.
    """
    wanted = stats_keys(buffer)
    for k in keys or []:
        buffer[k]  # KeyError naming an unknown key
    keys = wanted if keys is None else [k for k in keys if k in wanted]
    ends = np.asarray(buffer.episode_ends[: buffer.n_episodes], dtype=np.int64)
    rec = _record(buffer.store)
    out, stale, start = {}, {}, {}
    for key in keys:
        s, _ = (None, "") if recompute else _load(buffer, key, rec["keys"].get(key), ends)
        if s is not None and s.n_episodes == ends.size:
            out[key] = s
            continue
        start[key] = s.n_episodes if s is not None else 0
        stale[key] = s
    by_start: dict[int, list[str]] = {}
    for key, e in start.items():
        by_start.setdefault(e, []).append(key)
    for e, group in by_start.items():
        for key, new in (summarizer or summarize)(buffer, group, e, int(ends.size)).items():
            if stale[key] is not None:
                stale[key].extend(new)
                new = stale[key]
            out[key] = new
    if start and not buffer.read_only:
        _save(buffer, {k: out[k] for k in start}, ends, start)
    return {k: out[k] for k in keys}


class EditPlan:
    """What an edit does to the stored statistics, prepared before the edit (while the old episodes
    can still be read) and applied after it committed.

    Frame keys with a lossy codec (:mod:`replaybuf_core.store.lossy_frames`) are not summarised here:
    the edit re-encodes their rows from its start on, so their histogram follows the rows the edit
    rewrote — minus the old rows' counts, plus the rewritten rows' counts read back — which
    :func:`~replaybuf_core.store.editing.rewrite` measures while it backs up and reads back (nothing
    more is read).

    Args:
        buffer: the writable buffer being edited.
        deleted: sorted old indices of the episodes the edit deletes.
        trimmed: old index -> (start, stop) of each trimmed episode.
        lossy: the data keys with a lossy frame codec.
    """

    def __init__(self, buffer: Any, deleted: np.ndarray, trimmed: dict[int, tuple[int, int]],
                 lossy: Sequence[str] = ()):
        self.buffer, self.deleted, self.trimmed = buffer, np.asarray(deleted, dtype=np.int64), dict(trimmed)
        ends = np.asarray(buffer.episode_ends[: buffer.n_episodes], dtype=np.int64)
        lengths = np.diff(np.r_[0, ends])
        rec = _record(buffer.store)
        self.summaries: dict[str, KeySummary] = {}
        self.removed: dict[str, KeySummary] = {}
        self.lossy: list[str] = []
        #: what the rewrite re-encoded, per lossy frame key (set by the caller before :meth:`apply`)
        self.rewritten: dict[str, Any] = {}
        if not self.deleted.size and not self.trimmed:
            return  # the edit changes nothing
        for key in rec["keys"]:
            if key in buffer.keys():
                s, _ = _load(buffer, key, rec["keys"][key], ends)
                if s is not None and s.n_episodes == ends.size:
                    self.summaries[key] = s
        stale = sorted(set(rec["keys"]) - set(self.summaries))
        if stale:
            # An entry behind the store would not follow the edit, and after it the covered
            # episode_ends may read the same (deleting one of equal-length episodes): forget it now,
            # before anything changes, so it is recomputed rather than trusted.
            for key in stale:
                del rec["keys"][key]
            buffer.store.set_attrs("meta", {RECORD: rec})
            buffer._persist()
        self.lossy = [k for k in self.summaries if k in set(lossy) and self.summaries[k].kind == FRAMES]
        others = [k for k in self.summaries if k not in self.lossy]
        gone = int(lengths[self.deleted].sum()) if self.deleted.size else 0
        self.rebuild = gone > REBUILD_FRACTION * max(int(ends[-1]) if ends.size else 0, 1)
        if not others or self.rebuild:
            return
        parts: list[dict[str, KeySummary]] = []
        for run in np.split(self.deleted, np.flatnonzero(np.diff(self.deleted) != 1) + 1) if self.deleted.size else []:
            parts.append(summarize(buffer, others, int(run[0]), int(run[-1]) + 1))
        for i in self.trimmed:  # the whole old episode goes; its kept steps come back after the edit
            parts.append(summarize(buffer, others, i, i + 1))
        for key in others:
            total = None
            for p in parts:
                if total is None:
                    total = p[key]
                else:
                    total.extend(p[key])
            self.removed[key] = total

    def apply(self) -> None:
        """Bring the stored statistics to the edited store (call after the edit committed, having set
        :attr:`rewritten` to what the edit's rewrite returned: per lossy frame key, the histograms
        ``old_hist`` / ``new_hist`` of the rows it rewrote, before and after)."""
        if not self.summaries:
            return
        buffer = self.buffer
        ends = np.asarray(buffer.episode_ends[: buffer.n_episodes], dtype=np.int64)
        lossy = {}
        for key in self.lossy:
            s, r = self.summaries.pop(key), self.rewritten.get(key)
            if r is not None:  # (None: the edit changed nothing)
                s.hist = s.hist - r.old_hist + r.new_hist
                s.lengths = np.diff(np.r_[0, ends]).astype(np.int64)
            lossy[key] = s
        keys = list(self.summaries)
        if self.rebuild:
            _save(buffer, {**summarize(buffer, keys, 0, int(ends.size)), **lossy}, ends, {})
            return
        new_index = {i: i - int(np.searchsorted(self.deleted, i)) for i in self.trimmed}
        replaced = {i: summarize(buffer, keys, j, j + 1) for i, j in new_index.items()} if keys else {}
        for key, s in self.summaries.items():
            removed = self.removed[key]
            for i in self.trimmed:  # subtract the whole old episode, add back its kept steps
                piece = replaced[i][key]
                if s.kind == FRAMES:
                    removed.hist = removed.hist - piece.hist
                else:
                    removed.sketch.subtract(piece.sketch)
            s.remove(self.deleted, removed, {i: replaced[i][key] for i in self.trimmed})
        _save(buffer, {**self.summaries, **lossy}, ends, {})


def forget_stats(buffer: Any, key: str) -> None:
    """Forget the stored statistics of ``key`` before its committed rows are overwritten in place
    (``rb[key][a:b] = ...``): they are recomputed on the next ``get_stats``, never served stale.
    Imported statistics (LeRobot's ``stats.json``) go too."""
    from .source_records import drop_imported_stats

    rec = _record(buffer.store)
    if key in rec["keys"]:
        del rec["keys"][key]
        buffer.store.set_attrs("meta", {RECORD: rec})
        buffer._persist()
    drop_imported_stats(buffer.store, f"rows of {key!r} were overwritten")


def rehistogram(store: Any, keys: Sequence[str], ends: np.ndarray) -> list[str]:
    """Recompute, from the rows ``store`` (a writable StorageBackend) now holds, the stored histograms
    of the frame keys among ``keys`` that have a stored entry; returns those keys.

    For a copy or conversion that wrote ``keys`` through a lossy codec
    (:mod:`replaybuf_core.store.lossy_frames`): their pixels changed, so the statistics carried over
    would disagree with them (``replaybuf verify``).  Recomputing costs one decode of each such key
    (less than the encode that wrote it) and keeps the statistics at hand; an entry's coverage
    (episodes, generation, ``ends_sha256``) stays, only its histogram and digest change.  Entries of
    another kind, or covering more episodes than ``ends`` (int64 (n_episodes,)) holds, are dropped
    (recomputed on the next ``get_stats``).  The caller persists."""
    rec = _record(store)
    done, dropped = [], False
    for key in keys:
        entry = rec["keys"].get(key)
        if entry is None:
            continue
        e = entry.get("n_episodes") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or entry.get("kind") != FRAMES or not isinstance(e, int) \
                or not 0 <= e <= len(ends):
            del rec["keys"][key]
            dropped = True
            continue
        name = f"{PREFIX}{key}.hist"
        hist = frame_histogram(store, key, 0, int(ends[e - 1]) if e else 0)  # (one decode of the key)
        if store.has_array("meta", name):
            store.delete_array("meta", name)
        store.create_array("meta", name, shape=hist.shape, dtype=hist.dtype)
        store.write("meta", name, 0, hist)
        entry.update({"rows": {"hist": int(hist.shape[0])}, "sha256": _digest({name: hist})})
        done.append(key)
    if done or dropped:
        store.set_attrs("meta", {RECORD: rec})
    return done


def check_stored_stats(buffer: Any) -> list[tuple[str, str, str]]:
    """``replaybuf verify``'s check of the stored statistics of ``buffer`` (opened read-only):
    ``(level, where, message)`` for each finding.  An entry that cannot be trusted (see the module
    docstring) is an error when its arrays fail their hash, else a note (stale: recomputed on the next
    ``get_stats``); a trusted entry is recomputed from the data of the episodes it covers and must
    match exactly (moments to float64 rounding)."""
    out = []
    raw = buffer.store.get_attrs("meta").get(RECORD)
    if raw is None:
        return out
    if not (isinstance(raw, dict) and raw.get("version") == VERSION):
        version = raw.get("version") if isinstance(raw, dict) else None
        return [("note", f"meta/{RECORD}", f"stored statistics of version {version!r} (this replaybuf reads "
                                          f"version {VERSION}): ignored, recomputed on the next get_stats")]
    if not isinstance(raw.get("keys"), dict):
        return [("note", f"meta/{RECORD}", f"meta/{RECORD} holds no 'keys' mapping: ignored, recomputed on the "
                                          "next get_stats")]
    ends = np.asarray(buffer.episode_ends[: buffer.n_episodes], dtype=np.int64)
    for key, entry in sorted(raw["keys"].items()):
        where = f"meta/{PREFIX}{key}"
        if key not in buffer.keys():
            out.append(("note", where, f"statistics stored for {key!r}, which is not a data key"))
            continue
        s, why = _load(buffer, key, entry, ends)
        if s is None:
            level = "error" if "sha256" in why else "note"
            out.append((level, where, f"stored statistics of {key!r} are not used: {why}"))
            continue
        fresh = summarize(buffer, [key], 0, s.n_episodes)[key]
        if not _same(s, fresh):
            out.append(("error", where, f"stored statistics of {key!r} disagree with its data over the "
                                        f"{s.n_episodes} episodes they cover (data changed behind replaybuf's "
                                        "back?); `replaybuf stats PATH --recompute --save` replaces them"))
    return out


def _same(a: KeySummary, b: KeySummary) -> bool:
    if not np.array_equal(a.lengths, b.lengths):
        return False
    if a.kind == FRAMES:
        return np.array_equal(a.hist, b.hist)
    if not (np.array_equal(a.sketch.keys, b.sketch.keys) and np.array_equal(a.sketch.counts, b.sketch.counts)):
        return False
    return all(np.allclose(getattr(a, f), getattr(b, f), rtol=1e-9, atol=0, equal_nan=True)
               for f in ("mean", "m2", "min", "max"))
