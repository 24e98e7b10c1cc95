"""Normalisation statistics on the imported Push-T store: ``get_stats`` against one full read of the
same keys (``read_ranges`` of every step, no LRU of decoded chunks, page cache warm), alternating,
medians.  Numeric keys (state, action, keypoint, n_contacts) and the camera frames apart."""

from __future__ import annotations

import statistics
from pathlib import Path

from replaybuf_core import ReplayBuffer
from replaybuf_core.frames import frame_keys

from .common import Table, median_time


def run(table: Table, store: Path, smoke: bool) -> None:
    rb = ReplayBuffer.create_from_path(store)
    rb.cache_bytes = 0
    frames = frame_keys(rb)
    numeric = [k for k in rb.keys() if k not in frames and rb.store.dtype("data", k).kind in "biuf"]
    for label, keys in (("numeric keys", numeric), ("camera frames", frames)):
        if not keys:
            continue
        t_stats, t_read = [], []
        for _ in range(1 if smoke or label == "camera frames" else 5):
            t_stats.append(median_time(lambda: rb.get_stats(keys), 1))
            t_read.append(median_time(lambda: [rb.read_ranges(k, [0], [rb.n_steps]) for k in keys], 1))
        ts, tr = statistics.median(t_stats), statistics.median(t_read)
        table.add("stats", f"get_stats, {label} ({', '.join(keys)})", ts * 1e3, "ms", "{:.1f}")
        table.add("stats", f"one full read of the same {label}", tr * 1e3, "ms", "{:.1f}")
        goal = 1.5 if label == "numeric keys" else 3.0
        table.ratio("stats", f"get_stats / full read, {label}", ts / tr, f"<= {goal}", ts / tr <= goal)
