"""Episode generators and comparison helpers shared by the conformance tests."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from replaybuf_core.store.buffer import ReplayBuffer


def make_episode(length: int, seed: int = 0, *, strings: bool = False,
                 keys: tuple[str, ...] = ("action", "obs")) -> dict[str, np.ndarray]:
    """A deterministic episode of ``length`` steps: ``obs`` float32 (T, 3), ``action`` int64 (T,) and,
    with ``strings``, ``label`` str (object) (T,).  Only the keys named in ``keys`` (plus ``label``)."""
    rng = np.random.default_rng(seed)
    ep: dict[str, np.ndarray] = {}
    if "obs" in keys:
        ep["obs"] = rng.standard_normal((length, 3)).astype(np.float32)
    if "action" in keys:
        ep["action"] = rng.integers(-1000, 1000, size=length, dtype=np.int64)
    if strings:
        ep["label"] = np.array([f"s{seed}-{i}-é" for i in range(length)], dtype=object)
    return ep


def _as_plain(x: Any) -> np.ndarray:
    arr = np.asarray(x[...] if not isinstance(x, np.ndarray) else x)
    if arr.dtype.kind in ("U", "T"):
        arr = arr.astype(object)
    return arr


def assert_episode_equal(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Same keys, shapes, dtypes (object for strings) and values, bit for bit."""
    assert sorted(actual) == sorted(expected), (sorted(actual), sorted(expected))
    for k in expected:
        a, e = _as_plain(actual[k]), _as_plain(expected[k])
        assert a.shape == e.shape, (k, a.shape, e.shape)
        assert a.dtype == e.dtype, (k, a.dtype, e.dtype)
        if e.dtype == object:
            assert a.tolist() == e.tolist(), k
        else:
            np.testing.assert_array_equal(a, e, err_msg=k)
            assert a.tobytes() == e.tobytes(), k


def snapshot(buffer: ReplayBuffer) -> dict[str, Any]:
    """Everything observable about a buffer's content (to compare before/after a rejected call)."""
    return {
        "n_steps": buffer.n_steps,
        "n_episodes": buffer.n_episodes,
        "keys": buffer.keys(),
        "episode_ends": np.array(buffer.episode_ends, copy=True),
        "arrays": {k: np.array(buffer.store.read("data", k, 0, buffer.store.shape("data", k)[0]), copy=True)
                   for k in buffer.keys()},
        "shapes": {k: tuple(buffer.store.shape("data", k)) for k in buffer.keys()},
        "dtypes": {k: np.dtype(buffer.store.dtype("data", k)) for k in buffer.keys()},
        "meta": buffer.store.list_arrays("meta"),
    }


def assert_snapshot_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two :func:`snapshot` results are identical."""
    assert a["n_steps"] == b["n_steps"] and a["n_episodes"] == b["n_episodes"]
    assert a["keys"] == b["keys"] and a["meta"] == b["meta"]
    np.testing.assert_array_equal(a["episode_ends"], b["episode_ends"])
    assert a["shapes"] == b["shapes"] and a["dtypes"] == b["dtypes"]
    assert_episode_equal(a["arrays"], b["arrays"])


def assert_buffer_equal(actual: ReplayBuffer, expected: ReplayBuffer | list[Mapping[str, Any]]) -> None:
    """``actual`` holds the same episodes as ``expected`` (a buffer or a list of episode dicts)."""
    episodes = ([expected.get_episode(i, copy=True) for i in range(expected.n_episodes)]
                if isinstance(expected, ReplayBuffer) else list(expected))
    assert actual.n_episodes == len(episodes), (actual.n_episodes, len(episodes))
    lengths = [len(next(iter(e.values()))) for e in episodes]
    np.testing.assert_array_equal(actual.episode_ends, np.cumsum(lengths, dtype=np.int64))
    assert actual.n_steps == sum(lengths)
    for i, ep in enumerate(episodes):
        assert_episode_equal(actual.get_episode(i, copy=True), ep)


def tree_digest(path: str | os.PathLike, ignore: tuple[str, ...] = (".replaybuf.lock",)) -> str:
    """SHA-256 over every file below ``path`` (relative names and bytes, in sorted order), leaving out
    files named in ``ignore`` (the writer lock file by default): "nothing on disk changed" is
    ``tree_digest(p)`` before == after."""
    h = hashlib.sha256()
    root = os.fspath(path)
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f in ignore:
                continue
            p = os.path.join(d, f)
            h.update(os.path.relpath(p, root).encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()
