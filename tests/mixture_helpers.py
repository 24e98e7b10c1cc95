"""Tiny stores for the mixture tests, and the independent model of what a sample holds.

Every value tells where it came from: in store ``s``, key column ``c`` of global step ``t`` holds
``1000 * (s + 1) + 10 * t + c`` (so a read from a wrong store, step or column shows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer


def value(s: int, t: np.ndarray, c: int) -> np.ndarray:
    return 1000 * (s + 1) + 10 * np.asarray(t) + c


def episodes_data(s: int, lengths, dims: dict[str, int], dtypes: dict[str, str] | None = None):
    """Episodes of store ``s``: ``{key: (L, dims[key])}`` per episode, values from :func:`value`."""
    out, t0 = [], 0
    for n in lengths:
        t = np.arange(t0, t0 + n)
        ep = {}
        for k, d in dims.items():
            v = np.stack([value(s, t, c) for c in range(d)], axis=1)
            dt = np.dtype((dtypes or {}).get(k, "float32"))
            ep[k] = (v % 2 == 1) if dt.kind == "b" else v.astype(dt)
        out.append(ep)
        t0 += n
    return out


def make_store(path: Path, s: int, lengths, dims: dict[str, int], fps: float | None = None,
               dtypes: dict[str, str] | None = None, backend: str = "zarr") -> Path | ReplayBuffer:
    """A zarr store at ``path`` (or a numpy buffer, ``backend="numpy"``) of store number ``s``."""
    buf = ReplayBuffer.create_empty_numpy()
    for ep in episodes_data(s, lengths, dims, dtypes):
        buf.add_episode(ep)
    if backend == "numpy":
        if fps is not None:
            buf.store.set_attrs("data", {"fps": fps})
        return buf
    buf.save_to_path(path)
    if fps is not None:
        with ReplayBuffer(path) as rb:
            rb.store.set_attrs("data", {"fps": fps})
    return path


def anchors(lengths) -> list[tuple[int, int]]:
    """Every (episode, step) anchor of LeRobot's rule: each step of each episode."""
    return [(e, j) for e, n in enumerate(lengths) for j in range(n)]
