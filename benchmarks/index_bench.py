"""Step → episode index: ``ReplayBuffer.get_episode_idxs`` on 10 M steps / 100 k episodes vs np.repeat;
and the sampler's window table (``create_indices``) on the same episodes."""

from __future__ import annotations

import time

import numpy as np

from replaybuf_core import ReplayBuffer, get_episode_idxs
from replaybuf_core.sampling.sampler_indices import create_indices

from .common import Table, median_time


def run(table: Table, smoke: bool) -> None:
    n_ep, n_steps = (1_000, 100_000) if smoke else (100_000, 10_000_000)
    rng = np.random.default_rng(0)
    cuts = np.sort(rng.choice(np.arange(1, n_steps), n_ep - 1, replace=False))
    ends = np.append(cuts, n_steps).astype(np.int64)
    lengths = np.diff(ends, prepend=0)
    rb = ReplayBuffer({"data": {"x": np.zeros((n_steps, 1), np.uint8)}, "meta": {"episode_ends": ends}})
    t = time.perf_counter()
    first = rb.get_episode_idxs()
    t_first = time.perf_counter() - t
    t_later = median_time(rb.get_episode_idxs, 20)
    t_fn = median_time(lambda: get_episode_idxs(ends), 5)
    t_repeat = median_time(lambda: np.repeat(np.arange(n_ep), lengths), 5)
    assert np.array_equal(first, np.repeat(np.arange(n_ep), lengths))
    label = f"{n_steps // 1000}k steps/{n_ep // 1000}k ep"
    table.add("index", f"get_episode_idxs first call ({label})", t_first * 1e3, "ms")
    table.add("index", "get_episode_idxs later calls (cached)", t_later * 1e6, "µs")
    table.add("index", "get_episode_idxs(ends) uncached function", t_fn * 1e3, "ms")
    table.add("index", "np.repeat reference", t_repeat * 1e3, "ms")
    r = t_first / t_repeat
    table.ratio("index", "first call / np.repeat", r, "<= 1.5", r <= 1.5)
    r2 = t_fn / t_repeat
    table.ratio("index", "uncached function / np.repeat", r2, "<= 1.5", r2 <= 1.5)
    create_indices(ends[:10], 16, None, pad_before=1, pad_after=7)  # load the compiled kernel
    t_windows = median_time(lambda: create_indices(ends, 16, None, pad_before=1, pad_after=7), 3)
    table.add("index", "create_indices (seq 16, pads 1/7) same episodes", t_windows * 1e3, "ms")
