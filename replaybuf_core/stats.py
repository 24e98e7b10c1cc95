"""Per-key normalisation statistics in one streaming pass: count, mean, std, min, max.

Moments are merged block by block with the pairwise update of Chan, Golub & LeVeque ("Updating
formulae and a pairwise algorithm for computing sample variances", 1979) — never a running sum of
squares, which loses every digit once the mean dwarfs the spread.  ``std`` is the population
standard deviation (``np.std``'s default, LeRobot's ``compute_stats``).  Camera frames (uint8
(H, W, C)) are summarised per channel on ``x / 255``, shaped (C, 1, 1) as LeRobot stores them, from
exact 256-bin histograms.  Quantiles (``q01`` .. ``q99``, LeRobot's names) come from mergeable
summaries (:mod:`replaybuf_core.quantiles`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .frames import is_frames
from .quantiles import QuantileSketch, exact_dtype

__all__ = ["Moments", "compute_stats", "QUANTILES"]

BLOCK_BYTES = 64 << 20
#: quantiles reported, under LeRobot's names
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


class Moments:
    """Count, mean, M2 (sum of squared deviations), min and max of a stream of blocks.

    Args:
        shape: shape of one value (the feature dimensions the statistics are kept for).
    """

    def __init__(self, shape: tuple[int, ...]):
        self.count = 0
        self.mean = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)
        self.min = np.full(shape, np.inf)
        self.max = np.full(shape, -np.inf)

    def add(self, block: np.ndarray) -> None:
        """Merge a block (n, *shape) of values (any real dtype)."""
        n = int(block.shape[0])
        if n == 0:
            return
        x = block.astype(np.float64, copy=False)
        mean_b = x.mean(axis=0)
        m2_b = ((x - mean_b) ** 2).sum(axis=0)
        self.merge(n, mean_b, m2_b, x.min(axis=0), x.max(axis=0))

    def merge(self, n_b: int, mean_b: np.ndarray, m2_b: np.ndarray, min_b: np.ndarray, max_b: np.ndarray) -> None:
        """Chan et al.'s pairwise merge of another summary's moments into this one."""
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (n_b / n)
        self.m2 = self.m2 + m2_b + delta**2 * (n_a * n_b / n)
        self.count = n
        self.min = np.minimum(self.min, min_b)
        self.max = np.maximum(self.max, max_b)

    def result(self) -> dict[str, np.ndarray]:
        """``{"min", "max", "mean", "std", "count"}`` (float64 arrays of the value shape; count (1,))."""
        std = np.sqrt(self.m2 / self.count) if self.count else np.full_like(self.m2, np.nan)
        return {"min": self.min, "max": self.max, "mean": self.mean, "std": std,
                "count": np.array([self.count], dtype=np.int64)}


def _reader(buffer: Any, key: str):
    """``read(a, b)`` -> rows ``[a, b)`` of ``key``, through the buffer's batched reader when it has
    one (zarr: the fast chunk reader on the codec pool, not zarr-python's per-call machinery)."""
    ranges = getattr(buffer, "read_ranges", None)
    if callable(ranges):
        return lambda a, b: ranges(key, [a], [b])[0]
    arr = buffer[key]
    return lambda a, b: np.asarray(arr[a:b])


def _frame_stats(read, arr: Any, n_steps: int, channels: int) -> dict[str, np.ndarray]:
    """Per-channel statistics of uint8 frames on ``x / 255`` from exact 256-bin histograms
    (``np.bincount`` per channel; integer counts, so nothing is lost to float sums)."""
    hist = np.zeros((channels, 256), dtype=np.int64)
    frame_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)))
    step = max(1, BLOCK_BYTES // frame_bytes)
    for a in range(0, n_steps, step):
        block = read(a, min(a + step, n_steps)).reshape(-1, channels)
        for c in range(channels):
            hist[c] += np.bincount(np.ascontiguousarray(block[:, c]), minlength=256)
    values = np.arange(256, dtype=np.float64) / 255
    count = hist.sum(axis=1)
    mean = (hist * values).sum(axis=1) / np.maximum(count, 1)
    var = (hist * (values[None, :] - mean[:, None]) ** 2).sum(axis=1) / np.maximum(count, 1)
    seen = hist > 0
    lo = np.where(seen.any(axis=1), np.argmax(seen, axis=1), 0) / 255
    hi = np.where(seen.any(axis=1), 255 - np.argmax(seen[:, ::-1], axis=1), 0) / 255
    shape = (channels, 1, 1)
    out = {"min": lo.reshape(shape), "max": hi.reshape(shape), "mean": mean.reshape(shape),
           "std": np.sqrt(var).reshape(shape), "count": np.array([n_steps], dtype=np.int64)}
    cum = np.cumsum(hist, axis=1)
    for name, q in QUANTILES.items():  # exact: the value at rank floor(q (n - 1)), as np.quantile "lower"
        rank = np.floor(q * (count - 1)).astype(np.int64)
        out[name] = (np.array([np.searchsorted(cum[c], rank[c], side="right") for c in range(channels)])
                     / 255).reshape(shape)
    return out


def compute_stats(buffer: Any, keys: Sequence[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Statistics of the numeric / bool data keys of ``buffer`` over all its steps.

    Returns:
        ``{key: {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}}`` (LeRobot's
        names; float64 arrays); per feature dimension (the step shape), or per channel (C, 1, 1) of
        ``x / 255`` for camera frames (uint8 (H, W, C) steps, from exact per-channel histograms, so
        their quantiles are exact; ``count`` counts frames, as LeRobot does).  Quantiles of other
        keys come from :class:`~replaybuf_core.quantiles.QuantileSketch`: exact for bool and small
        integers, within 0.5 % of the true order statistic for floats (bound in
        :mod:`replaybuf_core.quantiles`).  Mean and std are exact up to float64 rounding (Chan et
        al.'s pairwise merge of per-block moments).  Keys of other kinds (strings) are left out.

    Raises:
        KeyError: a key of ``keys`` not in the buffer.
    """
    keys = list(buffer.keys()) if keys is None else list(keys)
    out = {}
    n_steps = int(buffer.n_steps)
    for key in keys:
        arr = buffer[key]
        dtype, shape = np.dtype(arr.dtype), tuple(arr.shape)
        if dtype.kind not in "biuf":
            continue
        read = _reader(buffer, key)
        if is_frames(shape, dtype):
            out[key] = _frame_stats(read, arr, n_steps, shape[-1])
            continue
        m = Moments(shape[1:])
        row_values = max(1, int(np.prod(shape[1:], dtype=np.int64)))
        sketch = QuantileSketch(row_values, exact=exact_dtype(dtype))
        step = max(1, BLOCK_BYTES // (8 * row_values))  # the float64 copy of a block stays ~64 MiB
        for a in range(0, n_steps, step):
            block = read(a, min(a + step, n_steps))
            m.add(block)
            sketch.add(block.reshape(block.shape[0], -1))
        res = m.result()
        for name, q in QUANTILES.items():
            res[name] = sketch.quantile(q).reshape(shape[1:])
        out[key] = res
    return out
