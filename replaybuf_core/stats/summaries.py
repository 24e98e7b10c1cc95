"""Per-key normalisation statistics as mergeable per-episode summaries: count, mean, std, min, max
and quantiles.

A :class:`KeySummary` of a run of episodes holds, for a numeric key, each episode's moments (mean,
M2 = sum of squared deviations, min, max per feature dimension) and one quantile sketch of all its
values; for camera frames (uint8 (H, W, C) steps), per-channel 256-bin histograms, from which every
statistic is exact.  Summaries of consecutive episode runs concatenate; a deleted episode's moments
row goes and its sketch counts are subtracted exactly; so stored statistics are kept up to date per
committed episode (:mod:`replaybuf_core.store.stored_stats`).

Totals use the pairwise formulae of Chan, Golub & LeVeque ("Updating formulae and a pairwise
algorithm for computing sample variances", 1979): ``mean = sum(n_i mean_i) / N`` and ``M2 = sum(M2_i)
+ sum(n_i (mean_i - mean)^2)`` — never a running sum of squares, which loses every digit once the mean
dwarfs the spread.  ``std`` is the population standard deviation (``np.std``'s default, LeRobot's
``compute_stats``).  Frames are summarised per channel on ``x / 255``, shaped (C, 1, 1) as LeRobot
stores them.  Quantiles (``q01`` .. ``q99``, LeRobot's names) come from
:class:`~replaybuf_core.stats.quantiles.QuantileSketch`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence

import numpy as np

from replaybuf_core.layout.frames import is_frames

from .kernels import channel_histograms, segment_moments
from .quantiles import QuantileSketch, exact_dtype

__all__ = ["KeySummary", "summarize", "compute_stats", "stats_keys", "QUANTILES"]

#: rows are read in blocks of about this many bytes (float64 working copies stay near it)
BLOCK_BYTES = 32 << 20
#: frame keys (uint8, summarised as histograms without a float copy) are read in smaller blocks: the
#: decoded block, the next one read meanwhile and the decoder's pieces are all alive at once
FRAME_BLOCK_BYTES = 8 << 20
#: quantiles reported, under LeRobot's names
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
FRAMES, VALUES = "frames", "values"


def stats_keys(buffer: Any) -> list[str]:
    """The data keys statistics are kept for: numeric and bool dtypes (strings and objects are not)."""
    return [k for k in buffer.keys() if np.dtype(buffer.store.dtype("data", k)).kind in "biuf"]


class KeySummary:
    """The mergeable summary of one key over a run of episodes.

    Attributes:
        kind: ``"frames"`` or ``"values"``.
        shape: the step shape (the key's shape without axis 0).
        exact: the sketch counts values exactly (bool, integers of at most 4 bytes).
        lengths: int64 (n_episodes,) steps per episode.
        mean, m2, min, max: float64 (n_episodes, n_columns) per-episode moments (values only;
            ``n_columns`` is the product of ``shape``).
        sketch: the :class:`QuantileSketch` of all values (values only).
        hist: int64 (C, 256) per-channel value counts (frames only).
    """

    def __init__(self, kind: str, shape: tuple[int, ...], exact: bool):
        self.kind, self.shape, self.exact = kind, tuple(int(s) for s in shape), bool(exact)
        d = int(np.prod(self.shape, dtype=np.int64))
        self.lengths = np.zeros(0, dtype=np.int64)
        self.mean, self.m2, self.min, self.max = (np.zeros((0, d)) for _ in range(4))
        self.sketch = QuantileSketch(d, exact=self.exact) if kind == VALUES else None
        self.hist = np.zeros((self.shape[-1], 256), dtype=np.int64) if kind == FRAMES else None

    @classmethod
    def for_array(cls, dtype: Any, shape: tuple[int, ...]) -> KeySummary:
        """An empty summary for a key of ``dtype`` and full ``shape`` (n_steps, *step)."""
        dtype, shape = np.dtype(dtype), tuple(shape)
        kind = FRAMES if is_frames(shape, dtype) else VALUES
        return cls(kind, shape[1:], exact_dtype(dtype))

    @property
    def n_episodes(self) -> int:
        return int(self.lengths.size)

    # ------------------------------------------------------------------ combining
    def extend(self, other: KeySummary) -> None:
        """Append the episodes summarised by ``other`` (same key layout) after this summary's."""
        self.lengths = np.concatenate([self.lengths, other.lengths])
        if self.kind == FRAMES:
            self.hist = self.hist + other.hist
            return
        for name in ("mean", "m2", "min", "max"):
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))
        self.sketch.merge(other.sketch)

    def remove(self, episodes: np.ndarray, removed: KeySummary | None, replaced: dict[int, KeySummary]) -> None:
        """Follow an edit: drop the rows of ``episodes`` (sorted old indices), subtract ``removed``
        (the summary of every step the edit removes), and replace the moments of each trimmed
        episode ``i`` (old index) by ``replaced[i]`` (its kept steps, one episode)."""
        for i, part in replaced.items():
            self.lengths[i] = part.lengths[0]
            if self.kind == VALUES:
                for name in ("mean", "m2", "min", "max"):
                    getattr(self, name)[i] = getattr(part, name)[0]
        keep = np.setdiff1d(np.arange(self.n_episodes), episodes)
        self.lengths = self.lengths[keep]
        if self.kind == FRAMES:
            self.hist = self.hist - removed.hist
            return
        for name in ("mean", "m2", "min", "max"):
            setattr(self, name, getattr(self, name)[keep])
        self.sketch.subtract(removed.sketch)

    # ------------------------------------------------------------------ reading
    def result(self) -> dict[str, np.ndarray]:
        """``{"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}`` (float64
        arrays of the step shape, or (C, 1, 1) on ``x / 255`` for frames; ``count`` int64 (1,), the
        number of steps: frames count as LeRobot counts them).  With no step: NaN statistics."""
        if self.kind == FRAMES:
            return _frame_result(self.hist, int(self.lengths.sum()))
        n = self.lengths.astype(np.float64)[:, None]
        total = float(n.sum())
        d = self.mean.shape[1]
        if total:
            with np.errstate(invalid="ignore", over="ignore"):
                mean = (n * self.mean).sum(axis=0) / total
                m2 = self.m2.sum(axis=0) + (n * (self.mean - mean) ** 2).sum(axis=0)
            out = {"min": self.min.min(axis=0), "max": self.max.max(axis=0), "mean": mean,
                   "std": np.sqrt(np.maximum(m2, 0) / total)}
        else:
            out = {s: np.full(d, np.nan) for s in ("min", "max", "mean", "std")}
        out = {s: v.reshape(self.shape) for s, v in out.items()}
        out["count"] = np.array([int(self.lengths.sum())], dtype=np.int64)
        lo, hi = out["min"].reshape(-1), out["max"].reshape(-1)
        for name, values in zip(QUANTILES, self.sketch.quantiles(list(QUANTILES.values()))):
            with np.errstate(invalid="ignore"):  # (a NaN bound leaves the estimate as it is)
                values = np.where(values < lo, lo, np.where(values > hi, hi, values))
            out[name] = values.reshape(self.shape)
        return out


def _frame_result(hist: np.ndarray, n_steps: int) -> dict[str, np.ndarray]:
    """Per-channel statistics of ``x / 255`` from exact 256-bin histograms (integer counts, so
    nothing is lost to float sums); quantiles are the values at rank ``floor(q (n - 1))``, as
    ``np.quantile(..., method="lower")``."""
    channels = hist.shape[0]
    values = np.arange(256, dtype=np.float64) / 255
    count = hist.sum(axis=1)
    mean = (hist * values).sum(axis=1) / np.maximum(count, 1)
    var = (hist * (values[None, :] - mean[:, None]) ** 2).sum(axis=1) / np.maximum(count, 1)
    seen = hist > 0
    any_seen = seen.any(axis=1)
    lo = np.where(any_seen, np.argmax(seen, axis=1) / 255, np.nan)
    hi = np.where(any_seen, (255 - np.argmax(seen[:, ::-1], axis=1)) / 255, np.nan)
    shape = (channels, 1, 1)
    out = {"min": lo.reshape(shape), "max": hi.reshape(shape),
           "mean": np.where(any_seen, mean, np.nan).reshape(shape),
           "std": np.where(any_seen, np.sqrt(var), np.nan).reshape(shape),
           "count": np.array([n_steps], dtype=np.int64)}
    cum = np.cumsum(hist, axis=1)
    for name, q in QUANTILES.items():
        rank = np.floor(q * (count - 1)).astype(np.int64)
        val = np.array([np.searchsorted(cum[c], rank[c], side="right") for c in range(channels)]) / 255
        out[name] = np.where(any_seen, val, np.nan).reshape(shape)
    return out


# ---------------------------------------------------------------------------- computing
def _blocks(lengths: np.ndarray, first_row: int, rows_per_block: int) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Blocks of rows over consecutive episodes of ``lengths`` starting at ``first_row``: yields
    ``(a, b, seg_starts, seg_stops, seg_episode)`` — the block's rows ``[a, b)`` and its segments
    (block-relative rows, one per piece of an episode inside the block; an episode longer than a
    block spans several blocks)."""
    ends = first_row + np.cumsum(lengths, dtype=np.int64)
    starts = ends - lengths
    stop = int(ends[-1]) if ends.size else first_row
    for a in range(first_row, stop, rows_per_block):
        b = min(a + rows_per_block, stop)
        e0 = int(np.searchsorted(ends, a, side="right"))
        e1 = int(np.searchsorted(starts, b, side="left"))
        eps = np.arange(e0, e1)
        eps = eps[lengths[eps] > 0]
        s = np.maximum(starts[eps], a) - a
        t = np.minimum(ends[eps], b) - a
        yield a, b, s, t, eps


def _merge_segments(parts: list, n_episodes: int, columns: int):
    """Per-episode moments (each (n_episodes, columns)) from the segment moments of every block:
    ``parts`` holds ``((mean, m2, min, max) of each segment, episode of each segment, rows of each
    segment)``; Chan et al.'s
    pairwise formulae, grouped by episode (segments come in episode order)."""
    shape = (n_episodes, columns)
    mean, m2 = np.zeros(shape), np.zeros(shape)
    lo, hi = np.full(shape, np.inf), np.full(shape, -np.inf)
    eps = np.concatenate([e for _, e, _ in parts]) if parts else np.zeros(0, dtype=np.int64)
    if not eps.size:
        return mean, m2, lo, hi
    seg_mean, seg_m2, seg_min, seg_max = (np.concatenate([p[i] for p, _, _ in parts]) for i in range(4))
    w = np.concatenate([n for _, _, n in parts]).astype(np.float64)[:, None]
    cut = np.flatnonzero(np.r_[True, eps[1:] != eps[:-1]])
    ep = eps[cut]
    with np.errstate(invalid="ignore", over="ignore"):  # inf in the data: NaN / inf, as NumPy's reductions
        mean[ep] = np.add.reduceat(w * seg_mean, cut, axis=0) / np.add.reduceat(w, cut, axis=0)
        dev = seg_mean - np.repeat(mean[ep], np.diff(np.r_[cut, eps.size]), axis=0)
        m2[ep] = np.add.reduceat(seg_m2 + w * dev**2, cut, axis=0)
    lo[ep] = np.minimum.reduceat(seg_min, cut, axis=0)
    hi[ep] = np.maximum.reduceat(seg_max, cut, axis=0)
    return mean, m2, lo, hi


def summarize(buffer: Any, keys: Sequence[str], first: int, stop: int) -> dict[str, KeySummary]:
    """The :class:`KeySummary` of each of ``keys`` over episodes ``[first, stop)`` of ``buffer``, in
    one streaming read: the buffer's batched reader when it has one (zarr: the fast chunk reader on
    the codec pool), each block read while the one before is summarised (the kernels release the
    GIL).  :func:`~replaybuf_core.cluster.stats.summarize_on_cluster` runs the same blocks on a
    Dask cluster, with the same result bit for bit."""
    out, jobs = plan_blocks(buffer, keys, first, stop)
    finish(out, summarize_blocks(buffer, jobs, out))
    return out


def plan_blocks(buffer: Any, keys: Sequence[str], first: int, stop: int) -> tuple[dict[str, KeySummary], list]:
    """Empty summaries of ``keys`` over episodes ``[first, stop)`` (their lengths set) and the blocks
    to read: ``(key, (a, b, seg_starts, seg_stops, seg_episode))`` in order (see :func:`_blocks`)."""
    ends = np.asarray(buffer.episode_ends[: buffer.n_episodes], dtype=np.int64)
    starts = np.r_[0, ends[:-1]] if ends.size else ends
    lengths = (ends - starts)[first:stop]
    row0 = int(starts[first]) if first < ends.size else 0
    out, jobs = {}, []
    for key in keys:
        arr = buffer[key]
        summary = KeySummary.for_array(stored_dtype(buffer, key, arr), tuple(arr.shape))
        summary.lengths = lengths.copy()
        out[key] = summary
        row_values = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)))
        per = max(1, (FRAME_BLOCK_BYTES if summary.kind == FRAMES else BLOCK_BYTES // 8) // row_values)
        jobs += [(key, block) for block in _blocks(lengths, row0, per)]
    return out, jobs


def stored_dtype(buffer: Any, key: str, arr: Any) -> np.dtype:
    """The dtype ``key`` is stored in — what statistics summarise (frames stored as uint8 count as
    frames even when reads return their source's float dtype): ``buffer.dtype_of(key, "stored")``
    for a :class:`~replaybuf_core.ReplayBuffer`, else ``arr.dtype``."""
    of = getattr(buffer, "dtype_of", None)
    return np.dtype(of(key, "stored")) if callable(of) else np.dtype(arr.dtype)


def summarize_blocks(buffer: Any, jobs: list, out: dict[str, KeySummary]) -> dict[str, list]:
    """Read and summarise the blocks ``jobs`` (of :func:`plan_blocks`): frame histograms and sketch
    counts are added into ``out``; returns each key's segment moments ``[((mean, m2, min, max),
    episodes, rows), ...]`` in block order, for :func:`finish`."""
    ranges = getattr(buffer, "read_ranges", None)

    def read(job):
        key, (a, b, *_rest) = job
        return ranges(key, [a], [b])[0] if callable(ranges) else np.asarray(buffer[key][a:b])

    parts: dict[str, list] = {key: [] for key, _ in jobs}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(read, jobs[0]) if jobs else None
        for i, (key, (_a, _b, s, t, eps)) in enumerate(jobs):
            block = pending.result()
            if i + 1 < len(jobs):
                pending = pool.submit(read, jobs[i + 1])
            summary = out[key]
            if summary.kind == FRAMES:
                channel_histograms(block, summary.hist)
                continue
            seg = segment_moments(block, s, t, summary.exact)
            summary.sketch.add_counts(*seg.counts())
            parts[key].append(((seg.mean, seg.m2, seg.min, seg.max), eps, t - s))
    return parts


def finish(out: dict[str, KeySummary], parts: dict[str, list]) -> None:
    """Set each value key's per-episode moments from the segment moments of all its blocks."""
    for key, summary in out.items():
        if summary.kind == VALUES:
            columns = summary.mean.shape[1]
            summary.mean, summary.m2, summary.min, summary.max = _merge_segments(parts.get(key, []),
                                                                                 summary.lengths.size, columns)


def compute_stats(buffer: Any, keys: Sequence[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Statistics of the numeric / bool data keys of ``buffer`` over all its steps, computed from
    scratch (:meth:`ReplayBuffer.get_stats` keeps them stored and up to date instead).

    Returns:
        ``{key: {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}}`` (LeRobot's
        names; float64 arrays); per feature dimension (the step shape), or per channel (C, 1, 1) of
        ``x / 255`` for camera frames (uint8 (H, W, C) steps, from exact per-channel histograms, so
        their quantiles are exact; ``count`` counts frames, as LeRobot does).  Quantiles of other
        keys come from :class:`~replaybuf_core.stats.quantiles.QuantileSketch`: exact for bool and small
        integers, within 0.39 % of the true order statistic for floats (bound in
        :mod:`replaybuf_core.stats.quantiles`).  Mean and std: from per-episode moments (corrected two-pass)
        merged pairwise; the relative error of ``std`` is about ``1e-16 |mean| / std`` (1e-6 for a
        mean of 1e9 and a spread of 1e-3).  An inf in a column makes its mean +-inf and its std NaN,
        a NaN all four NaN, as NumPy's reductions.  Keys of other kinds (strings) are left out.

    Raises:
        KeyError: a key of ``keys`` not in the buffer.
    """
    wanted = stats_keys(buffer)
    for k in keys or []:
        buffer[k]  # KeyError for an unknown key
    keys = wanted if keys is None else [k for k in keys if k in wanted]
    return {k: s.result() for k, s in summarize(buffer, keys, 0, int(buffer.n_episodes)).items()}
