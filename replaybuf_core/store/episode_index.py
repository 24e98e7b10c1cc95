"""Step → episode index map."""

from __future__ import annotations

import numpy as np


def episode_lengths_from_ends(episode_ends: np.ndarray) -> np.ndarray:
    """Episode lengths (int64, shape (n_episodes,)) from cumulative ``episode_ends``."""
    ends = np.asarray(episode_ends, dtype=np.int64)
    return np.diff(ends, prepend=np.int64(0)) if ends.size else np.zeros(0, dtype=np.int64)


def get_episode_idxs(episode_ends: np.ndarray) -> np.ndarray:
    """For every step, the index of the episode holding it.

    Args:
        episode_ends: int64 (n_episodes,), cumulative, non-decreasing.

    Returns:
        int64 array of shape (episode_ends[-1],): ``out[t] = e`` where episode ``e`` holds step ``t``.

    A vectorised ``np.repeat`` of the episode indices by their lengths: it measured faster than the
    seed's numba loop (and needs no compilation); ``benchmarks/`` shows the figure.
    """
    lengths = episode_lengths_from_ends(episode_ends)
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)


def episode_of_steps(episode_ends: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Episode index of each step in ``steps`` (int array, any shape) by binary search; O(log n) each.

    Raises:
        IndexError: a step is negative or ≥ ``episode_ends[-1]``.
    """
    ends = np.asarray(episode_ends, dtype=np.int64)
    steps = np.asarray(steps)
    n_steps = int(ends[-1]) if ends.size else 0
    if steps.size and (steps.min() < 0 or steps.max() >= n_steps):
        bad = steps[(steps < 0) | (steps >= n_steps)].flat[0]
        raise IndexError(f"step {int(bad)} is out of range for a buffer of {n_steps} steps")
    return np.searchsorted(ends, steps, side="right").astype(np.int64)
