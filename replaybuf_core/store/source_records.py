"""What an import recorded of its source (the ``data`` attributes ``fps`` and ``source_attrs``:
LeRobot's ``info``, ``tasks`` and ``stats.json``), kept true through merges and edits.

* **Merges** refuse sources of different ``fps`` (their timestamps would mean other times), build one
  task table (source 0's indices kept, the other sources' new texts appended) and renumber each later
  source's ``task_index`` column to it, so an episode keeps its task text; the imported
  ``stats.json`` (it describes source 0 only) is dropped — statistics then come from the store's own
  (:meth:`~replaybuf_core.ReplayBuffer.get_stats`, merged exactly).
* **Edits** (delete, trim, keep) drop the imported ``stats.json`` before they begin: it counts steps
  that will not be there (the store's own statistics follow edits).  Dropping derived data first
  means a kill can cost a recomputation, never serve stale numbers.

Each drop leaves ``source_attrs["dropped"]`` saying what and why.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["merge_records", "drop_imported_stats", "remap_tasks"]


def _source(store: Any) -> dict:
    return dict(store.get_attrs("data").get("source_attrs") or {})


def drop_imported_stats(store: Any, why: str) -> bool:
    """Remove the imported ``stats.json`` from ``store``'s records (``why``: the verb); True when there was one."""
    src = _source(store)
    if not src.get("stats"):
        return False
    src["stats"] = None
    src["dropped"] = list(src.get("dropped") or []) + [f"stats.json: no longer true after {why} (statistics: get_stats)"]
    store.set_attrs("data", {"source_attrs": src})
    return True


def merge_records(buffers: Sequence[Any]) -> tuple[dict | None, list[np.ndarray | None], list[str]]:
    """``(source_attrs of the merged store or None to keep source 0's, per source a task_index lookup
    table (old index → merged) or None, notes)``.

    Raises:
        ValueError: two sources of different ``fps`` (named, with both rates).
    """
    attrs = [b.store.get_attrs("data") for b in buffers]
    rates = [(i, float(a["fps"])) for i, a in enumerate(attrs) if a.get("fps")]
    for i, f in rates[1:]:
        if f != rates[0][1]:
            raise ValueError(f"source {i} records {f:g} fps, source {rates[0][0]} {rates[0][1]:g} fps: a merged store "
                             "has one frame rate (its timestamps and delta_timestamps mean it); resample one first")
    sources = [dict(a.get("source_attrs") or {}) for a in attrs]
    if not any(s.get("tasks") or s.get("stats") for s in sources):
        return None, [None] * len(buffers), []
    table = {int(k): str(v) for k, v in (sources[0].get("tasks") or {}).items()}
    index_of = {text: k for k, text in sorted(table.items(), reverse=True)}  # the first index of a text
    lookups: list[np.ndarray | None] = [None]
    notes = []
    for i, s in enumerate(sources[1:], 1):
        theirs = {int(k): str(v) for k, v in (s.get("tasks") or {}).items()}
        remap = {}
        for k in sorted(theirs):
            text = theirs[k]
            if text not in index_of:
                index_of[text] = max(table, default=-1) + 1
                table[index_of[text]] = text
            remap[k] = index_of[text]
        if any(k != v for k, v in remap.items()):
            lookup = np.arange(max(remap) + 1, dtype=np.int64)
            for k, v in remap.items():
                lookup[k] = v
            lookups.append(lookup)
            notes.append(f"source {i}: task_index renumbered to the merged task table")
        else:
            lookups.append(None)
    merged = dict(sources[0])
    merged["tasks"] = {str(k): table[k] for k in sorted(table)}
    if merged.get("stats"):
        merged["stats"] = None
        merged["dropped"] = list(merged.get("dropped") or []) + [
            "stats.json: it described source 0 only (statistics: get_stats, merged over every source)"]
        notes.append("source 0's imported stats.json (LeRobot's statistics of that dataset alone) is not kept; "
                     "LeRobotDataset serves the merged store's own statistics, which cover every source")
    return merged, lookups, notes


def remap_tasks(episode: dict[str, np.ndarray], lookup: np.ndarray | None) -> dict[str, np.ndarray]:
    """``episode`` with its ``task_index`` column renumbered by ``lookup`` (indices past it kept)."""
    if lookup is None or "task_index" not in episode:
        return episode
    t = np.asarray(episode["task_index"])
    inside = (t >= 0) & (t < lookup.size)
    out = t.copy()
    out[inside] = lookup[t[inside].astype(np.int64)].astype(t.dtype)
    return {**episode, "task_index": out}
