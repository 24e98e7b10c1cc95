"""In-place edits on the imported Push-T store: what an edit costs against rewriting the store.

On fresh copies of the store (the copy is not timed): ``delete_episodes`` of the last episode (the
tail only), of a middle one and of the first (everything after it moves: the most an edit rewrites),
``trim_episode`` of the first episode by one step, and the full rewrite a user does without edits
(``copy_from_path`` into memory without the episode, then ``save_to_path``: decode and encode
everything).  Each edit includes its backup, journal and cleanup (see ``replaybuf_core.store.editing``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer

from .common import Table


def _timed_edit(store: Path, tmp: Path, edit) -> float:
    work = tmp / "edit.zarr"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(store, work)
    with ReplayBuffer(str(work)) as rb:
        t = time.perf_counter()
        edit(rb)
        dt = time.perf_counter() - t
    shutil.rmtree(work)
    return dt


def _full_rewrite(store: Path, tmp: Path) -> float:
    """Without edits: read everything but the last episode, write a new store."""
    out = tmp / "rewrite.zarr"
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    src = ReplayBuffer.create_from_path(store)
    keep = src.get_steps_slice(0, int(src.episode_ends[-2]), dtypes="stored")  # as stored: the codecs below hold uint8
    mem = ReplayBuffer.create_empty_numpy()
    ends = np.asarray(src.episode_ends[:-1])
    starts = np.concatenate([[0], ends[:-1]])
    for a, b in zip(starts, ends):
        mem.add_episode({k: v[a:b] for k, v in keep.items()})
    mem.save_to_path(out, compressors={k: src.store.codec("data", k) for k in src.keys()},
                     chunks={k: tuple(src.store.chunks("data", k)) for k in src.keys()})
    dt = time.perf_counter() - t
    shutil.rmtree(out)
    return dt


def run(table: Table, store: Path, tmp: Path, smoke: bool) -> None:
    n = ReplayBuffer.create_from_path(store).n_episodes
    rows = {
        "delete_episodes: the last episode": lambda rb: rb.delete_episodes([n - 1]),
        "delete_episodes: a middle episode": lambda rb: rb.delete_episodes([n // 2]),
        "delete_episodes: the first episode": lambda rb: rb.delete_episodes([0]),
        "trim_episode: first episode, one step": lambda rb: rb.trim_episode(0, 1),
    }
    times = {name: _timed_edit(store, tmp, fn) for name, fn in rows.items()}
    t_full = _full_rewrite(store, tmp)
    for name, t in times.items():
        table.add("edit", name, t * 1e3, "ms", "{:.0f}")
    table.add("edit", "full rewrite without the last episode (reference)", t_full * 1e3, "ms", "{:.0f}")
    r = times["delete_episodes: the last episode"] / t_full
    table.ratio("edit", "delete last episode / full rewrite", r, "< 0.1", r < 0.1)
    r2 = times["delete_episodes: the first episode"] / t_full
    table.ratio("edit", "delete first episode / full rewrite", r2, "< 1.5", r2 < 1.5)
