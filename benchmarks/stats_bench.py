"""Normalisation statistics on the imported Push-T store.

* From scratch: :func:`compute_stats` against one full read of the same keys (``read_ranges`` of
  every step: our fast chunk reader, no LRU of decoded chunks, page cache warm; and zarr-python's own
  ``array[:]``), alternating, medians.  Numeric keys (state, action, keypoint, n_contacts) and the
  camera frames apart.
* Kept up to date: ``get_stats`` after one more episode (reads only it) and with nothing new (reads
  the stored summary), every key, against the from-scratch figure.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.frames import frame_keys
from replaybuf_core.stats.summaries import compute_stats

from .common import Table, median_time


def run(table: Table, store: Path, smoke: bool) -> None:
    rb = ReplayBuffer.create_from_path(store)
    rb.cache_bytes = 0
    frames = frame_keys(rb)
    numeric = [k for k in rb.keys() if k not in frames and rb.store.dtype("data", k).kind in "biuf"]
    group = zarr.open_group(str(store), mode="r")
    compute_stats(rb, numeric[:1])  # the kernels' compilation (cached on disk) is not timed
    for label, keys in (("numeric keys", numeric), ("camera frames", frames)):
        if not keys:
            continue
        t_stats, t_read, t_zarr = [], [], []
        for _ in range(1 if smoke or label == "camera frames" else 7):
            t_stats.append(median_time(lambda: compute_stats(rb, keys), 1))
            t_read.append(median_time(lambda: [rb.read_ranges(k, [0], [rb.n_steps]) for k in keys], 1))
            if label == "numeric keys":
                t_zarr.append(median_time(lambda: [group["data"][k][:] for k in keys], 1))
        ts, tr = statistics.median(t_stats), statistics.median(t_read)
        table.add("stats", f"stats from scratch, {label} ({', '.join(keys)})", ts * 1e3, "ms", "{:.1f}")
        table.add("stats", f"one full read of the same {label} (fast reader)", tr * 1e3, "ms", "{:.1f}")
        goal = 1.5 if label == "numeric keys" else 3.0
        table.ratio("stats", f"stats from scratch / fast full read, {label}", ts / tr, f"<= {goal}", ts / tr <= goal)
        if t_zarr:
            tz = statistics.median(t_zarr)
            table.add("stats", f"one full read of the same {label} (zarr-python array[:])", tz * 1e3, "ms", "{:.1f}")
            table.ratio("stats", f"stats from scratch / zarr-python full read, {label}", ts / tz, "<= 1.5", ts / tz <= 1.5)
    rb.close()
    _incremental(table, store, smoke)


def _incremental(table: Table, store: Path, smoke: bool) -> None:
    """On the imported store itself (its import saved the statistics): add a copy of the last
    episode, time ``get_stats`` (reads only it), again (nothing new), then drop the copy; against the
    same statistics from scratch."""
    t_add, t_none = [], []
    with ReplayBuffer(store) as rb:
        rb.cache_bytes = 0
        last = rb.get_episode(rb.n_episodes - 1, copy=True)
        rb.get_stats()
        for _ in range(1 if smoke else 5):
            rb.add_episode(last)
            t_add.append(median_time(rb.get_stats, 1))
            t_none.append(median_time(rb.get_stats, 1))
            rb.drop_episode()
        t_scratch = median_time(lambda: compute_stats(rb), 1)
        n, keys = rb.n_episodes, ", ".join(k for k in rb.keys() if k in rb.get_stats())
    ta, tn = statistics.median(t_add), statistics.median(t_none)
    steps = len(next(iter(last.values())))
    table.add("stats", f"get_stats after one new episode ({steps} steps; {keys})", ta * 1e3, "ms", "{:.1f}")
    table.add("stats", "get_stats with nothing new (the stored summary)", tn * 1e3, "ms", "{:.1f}")
    table.add("stats", f"stats from scratch, the same keys over {n + 1} episodes", t_scratch * 1e3, "ms", "{:.1f}")
    table.ratio("stats", f"one-episode update / from scratch ({n + 1} episodes)", ta / t_scratch,
                "~ 1 / episodes", ta < 5 * t_scratch / (n + 1))
