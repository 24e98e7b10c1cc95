"""Statistics of several stores' summaries of one key, placed into a common (possibly wider) shape:
pooled over the stores, or one store's alone with the padded entries left NaN.

A part is ``(summary, columns)``: a :class:`~replaybuf_core.stats.summaries.KeySummary` and, for each
of its columns (flattened step entries; channels for camera frames), the column of the common shape
it lands in.  Per column, the parts that land there are merged with Chan, Golub & LeVeque's pairwise
formulae (``mean = sum(n_i mean_i) / N``, ``M2 = sum(M2_i) + sum(n_i (mean_i - mean)^2)``), the same
as :meth:`KeySummary.result` merges episodes; quantile sketches and frame histograms add their counts
(a sketch of exact integers joins float columns in logarithmic buckets).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .quantiles import QuantileSketch
from .summaries import FRAMES, QUANTILES, KeySummary, _frame_result

__all__ = ["pooled_result", "column_map"]


def column_map(step_shape: Sequence[int], target_shape: Sequence[int]) -> np.ndarray:
    """int64 (prod(step_shape),): where each entry of a step of ``step_shape`` lands in the
    flattened ``target_shape`` (same rank, each axis no longer): entry ``i`` keeps its index."""
    step_shape, target_shape = tuple(step_shape), tuple(target_shape)
    idx = np.unravel_index(np.arange(int(np.prod(step_shape, dtype=np.int64))), step_shape)
    return np.ravel_multi_index(idx, target_shape).astype(np.int64) if step_shape else np.zeros(1, np.int64)


def _totals(s: KeySummary) -> tuple[np.ndarray, ...]:
    """Per column of ``s``: count, mean, M2, min, max over all its episodes."""
    n = s.lengths.astype(np.float64)[:, None]
    total = float(n.sum())
    d = s.mean.shape[1]
    if not total:
        return np.zeros(d), np.zeros(d), np.zeros(d), np.full(d, np.inf), np.full(d, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = (n * s.mean).sum(axis=0) / total
        m2 = s.m2.sum(axis=0) + (n * (s.mean - mean) ** 2).sum(axis=0)
    return np.full(d, total), mean, m2, s.min.min(axis=0), s.max.max(axis=0)


def pooled_result(parts: Sequence[tuple[KeySummary, np.ndarray]], shape: Sequence[int]) -> dict[str, np.ndarray]:
    """``{"min", "max", "mean", "std", "count", "q01", ..., "q99"}`` of ``parts`` pooled in ``shape``
    (the step shape for values; for camera frames the (H, W, C) step, results per channel (C, 1, 1)).
    Columns no part covers are NaN; ``count`` (int64 (1,)) is the parts' steps in all.

    Raises:
        ValueError: parts of different kinds (frames and values), or no part.
    """
    if not parts:
        raise ValueError("pooled_result needs at least one summary")
    kinds = {s.kind for s, _ in parts}
    if len(kinds) > 1:
        raise ValueError("frames and other values do not pool into one statistic")
    steps = int(sum(int(s.lengths.sum()) for s, _ in parts))
    shape = tuple(int(x) for x in shape)
    if kinds == {FRAMES}:
        hist = np.zeros((shape[-1], 256), dtype=np.int64)
        for s, cols in parts:
            hist[np.asarray(cols, dtype=np.int64)] += s.hist
        return _frame_result(hist, steps)
    d = int(np.prod(shape, dtype=np.int64))
    count, weighted, lo, hi = np.zeros(d), np.zeros(d), np.full(d, np.inf), np.full(d, -np.inf)
    totals = [(_totals(s), np.asarray(cols, dtype=np.int64)) for s, cols in parts]
    for (n, mean, _m2, mn, mx), cols in totals:
        with np.errstate(invalid="ignore", over="ignore"):
            count[cols] += n
            weighted[cols] += np.where(n > 0, n * mean, 0)
        lo[cols] = np.minimum(lo[cols], mn)
        hi[cols] = np.maximum(hi[cols], mx)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean = weighted / count
        m2 = np.zeros(d)
        for (n, part_mean, part_m2, _mn, _mx), cols in totals:
            m2[cols] += np.where(n > 0, part_m2 + n * (part_mean - mean[cols]) ** 2, 0)
        std = np.sqrt(np.maximum(m2, 0) / count)
    empty = count == 0
    out = {"min": np.where(empty, np.nan, lo), "max": np.where(empty, np.nan, hi),
           "mean": np.where(empty, np.nan, mean), "std": np.where(empty, np.nan, std)}
    exact = all(s.exact for s, _ in parts)
    sketch = QuantileSketch(d, exact)
    for s, cols in parts:
        sketch.merge((s.sketch if exact else s.sketch.inexact()).remapped(cols, d))
    for name, values in zip(QUANTILES, sketch.quantiles(list(QUANTILES.values()))):
        with np.errstate(invalid="ignore"):
            values = np.where(values < out["min"], out["min"], np.where(values > out["max"], out["max"], values))
        out[name] = values
    out = {k: v.reshape(shape) for k, v in out.items()}
    out["count"] = np.array([steps], dtype=np.int64)
    return out
