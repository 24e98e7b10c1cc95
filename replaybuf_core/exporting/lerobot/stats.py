"""LeRobot's statistics of a feature: per episode (``meta/episodes``' ``stats/<feature>/<stat>``
columns) and over the dataset (``meta/stats.json``).

What LeRobot 0.4's writer computes (``lerobot/datasets/compute_stats.py``): for every feature
``min``, ``max``, ``mean``, ``std`` (population), ``count`` and the quantiles ``q01 q10 q50 q90
q99`` over the episode's rows, per element of the step; for camera features per channel over the
pixels of (a sample of) the episode's frames scaled to 0..1, kept as shape ``(C, 1, 1)``.  Dataset
statistics aggregate the episodes': counts add, min/max are element-wise, the mean is the
count-weighted mean, the variance the pooled one (within plus between episodes) and quantiles the
count-weighted mean of the episodes' quantiles, as LeRobot's ``aggregate_stats`` does.
"""

from __future__ import annotations

import numpy as np

__all__ = ["QUANTILES", "aggregate", "episode_stats", "frame_sample"]

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
#: frames an episode's camera statistics look at (evenly spaced; all when the episode is shorter)
MAX_FRAMES = 100


def frame_sample(n: int) -> np.ndarray:
    """Row indices of an ``n``-frame episode the camera statistics use (int64, sorted, unique)."""
    if n <= MAX_FRAMES:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, MAX_FRAMES).round().astype(np.int64))


def episode_stats(values: np.ndarray, camera: bool) -> dict[str, np.ndarray]:
    """Statistics of one episode's rows ``values`` (``(T, *step)``; a camera's ``(t, H, W, C)``
    uint8 frames — already sampled with :func:`frame_sample` — gives ``(C, 1, 1)`` float64 values
    over pixels scaled to 0..1 and ``count`` the frames looked at, as LeRobot's).  Other values
    give arrays of the step's shape (``(1,)`` for a scalar step); ``count`` is ``(1,)`` int64."""
    if camera:
        return _frame_stats(np.asarray(values, dtype=np.uint8))
    else:
        x = values.astype(np.float64).reshape(len(values), -1)
        step = values.shape[1:] or (1,)
        def shape(v): return np.asarray(v, dtype=np.float64).reshape(step)
    out = {"min": shape(x.min(axis=0)), "max": shape(x.max(axis=0)), "mean": shape(x.mean(axis=0)),
           "std": shape(x.std(axis=0)), "count": np.array([len(values)], dtype=np.int64)}
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    for (name, _), q in zip(QUANTILES.items(), qs):
        out[name] = shape(q)
    return out


def aggregate(stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The dataset statistics of per-episode ``stats`` (see the module docstring)."""
    counts = np.array([int(s["count"][0]) for s in stats], dtype=np.float64)
    total = counts.sum()
    w = counts / total
    def wsum(name): return sum(wi * s[name] for wi, s in zip(w, stats))
    mean = wsum("mean")
    var = sum(wi * (s["std"] ** 2 + (s["mean"] - mean) ** 2) for wi, s in zip(w, stats))
    out = {"min": np.min([s["min"] for s in stats], axis=0), "max": np.max([s["max"] for s in stats], axis=0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([int(total)], dtype=np.int64)}
    for name in QUANTILES:
        out[name] = wsum(name)
    return out


def _frame_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`episode_stats` of uint8 frames from each channel's 256-bin histogram: the same values
    as over the pixels themselves (quantiles by numpy's default linear interpolation between order
    statistics), without sorting them."""
    c = frames.shape[-1]
    flat = frames.reshape(-1, c)
    n = len(flat)
    levels = np.arange(256, dtype=np.float64)
    out: dict[str, list[float]] = {k: [] for k in ("min", "max", "mean", "std", *QUANTILES)}
    for ch in range(c):
        counts = np.bincount(flat[:, ch], minlength=256).astype(np.float64)
        cum = np.cumsum(counts)
        mean = float(counts @ levels) / n
        out["min"].append(float(np.flatnonzero(counts)[0]))
        out["max"].append(float(np.flatnonzero(counts)[-1]))
        out["mean"].append(mean)
        out["std"].append(float(np.sqrt(max(counts @ (levels - mean) ** 2 / n, 0.0))))
        for name, q in QUANTILES.items():
            pos = q * (n - 1)
            lo = int(np.floor(pos))
            v_lo = float(np.searchsorted(cum, lo, side="right"))  # the value of order statistic lo
            v_hi = float(np.searchsorted(cum, min(lo + 1, n - 1), side="right"))
            out[name].append(v_lo + (pos - lo) * (v_hi - v_lo))
    result = {k: np.asarray(v, dtype=np.float64).reshape(c, 1, 1) / 255.0 for k, v in out.items()}
    result["count"] = np.array([len(frames)], dtype=np.int64)
    return result
