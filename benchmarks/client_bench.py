"""diffusion_policy's dataset code on our store, against its own in-memory buffer, side by side.

Per item: its ``SequenceSampler.sample_sequence`` (``replay_buffer[key][a:b]`` per key; Push-T's
setting: 16 steps, 2 image frames and 2 states, ``pad_before=1, pad_after=7``), then
``PushTImageDataset._sample_to_data`` and ``torch.from_numpy`` — written from its public code in
:mod:`replaybuf_core.testing.diffusion_policy_client`.  The same random items, three buffers:

* its own in-memory buffer — the Push-T arrays in NumPy (what its ``copy_from_path`` loads);
* our store, opened (``ReplayBuffer.create_from_path``: ``rb[key]`` reads through the chunk reader
  and its 256 MiB cache of decoded chunks);
* our store after ``rb.warm(keys)`` (``rb[key]`` indexes the in-memory copy).

Goals (issue 31): opened ≥ 0.5× the in-memory buffer's items/s; after warm ≥ 0.9×.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer
from replaybuf_core.testing.diffusion_policy_client import ClientSequenceSampler, InMemoryBuffer, pusht_sample_to_data

from .common import Table

KEYS = ["img", "state", "action"]
SETTINGS = dict(sequence_length=16, pad_before=1, pad_after=7, keys=KEYS, key_first_k={"img": 2, "state": 2})


def _item(sampler: ClientSequenceSampler, idx: int) -> None:
    data = pusht_sample_to_data(sampler.sample_sequence(idx))
    try:
        import torch
    except ImportError:
        return
    torch.from_numpy(data["obs"]["image"]), torch.from_numpy(data["action"])


def run(table: Table, source: Path, store: Path, smoke: bool) -> None:
    n_episodes = ReplayBuffer.create_from_path(store).n_episodes
    theirs = ClientSequenceSampler(InMemoryBuffer(source, KEYS, n_episodes), **SETTINGS)
    opened = ClientSequenceSampler(ReplayBuffer.create_from_path(store), **SETTINGS)
    warm_rb = ReplayBuffer.create_from_path(store)
    warm_rb.warm(KEYS)
    warmed = ClientSequenceSampler(warm_rb, **SETTINGS)
    n_items, n_rounds = (200, 2) if smoke else (2000, 5)
    rng = np.random.default_rng(0)
    ways = {"its own in-memory buffer": theirs, "our store, opened": opened, "our store, after warm": warmed}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(n_rounds):  # the same items for every way, who goes first rotating
        items = rng.integers(0, len(theirs), n_items).tolist()
        for name, sampler in ways.items():
            t = time.perf_counter()
            for i in items:
                _item(sampler, i)
            times[name].append((time.perf_counter() - t) / n_items)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in ways:
        table.add("client", f"diffusion_policy __getitem__, {name}", med[name] * 1e3, "ms", "{:.3f}")
    r_open = med["its own in-memory buffer"] / med["our store, opened"]
    r_warm = med["its own in-memory buffer"] / med["our store, after warm"]
    table.ratio("client", "diffusion_policy items/s: opened store / its in-memory buffer", r_open, ">= 0.5", r_open >= 0.5)
    table.ratio("client", "diffusion_policy items/s: after warm / its in-memory buffer", r_warm, ">= 0.9", r_warm >= 0.9)
