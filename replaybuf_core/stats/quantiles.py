"""Mergeable quantile summaries of many columns: exact counts for small integers, logarithmic
buckets for the rest.

* **Exact** (bool and integer dtypes of at most 4 bytes): one bucket per value; a quantile is a
  value of the data.
* **Logarithmic buckets** (floats, 8-byte integers): a value's bucket is its float64 sign, exponent
  and top ``MANTISSA_BITS`` mantissa bits — the bucketing of HDR histograms, and DDSketch's
  relative-error idea (Masson, Rim & Lee, "DDSketch: a fast and fully-mergeable quantile sketch
  with relative-error guarantees", VLDB 2019) with a base-2 mapping read straight off the bits, so
  a block is bucketed in one compiled pass (:mod:`replaybuf_core.stats.kernels`).  A bucket reads back as its midpoint.

**Error bound.**  For ``q`` in [0, 1] let ``lo`` / ``hi`` be ``np.quantile(x, q, method="lower")``
/ ``"higher"`` (the order statistics around rank ``q (n - 1)``).  The estimate ``e`` lies in
``[lo - ALPHA |lo|, hi + ALPHA |hi|]`` with ``ALPHA = 2 ** -(MANTISSA_BITS + 1)`` (0.39 %): within a
relative 0.39 % of the true order statistic (0 reads back exactly), and exact for exact columns.
The relative bound holds for normal floats; float64 subnormals (``|x| < 2.2e-308``, below float32's
range too) share coarse buckets and read back within ``2.3e-308`` absolutely.
:class:`~replaybuf_core.stats.summaries.KeySummary` clips quantiles into the column's [min, max], which only
moves an estimate closer to the truth.
Summaries merge by adding counts and forget deleted values by subtracting theirs, both exactly: the
summary of episodes merged in any order equals the summary of all of them.
"""

from __future__ import annotations

import numpy as np

from .kernels import COL as _COL
from .kernels import HALF as _HALF
from .kernels import MANTISSA_BITS, segment_moments
from .kernels import SHIFT as _SHIFT

__all__ = ["QuantileSketch", "ALPHA", "MANTISSA_BITS", "exact_dtype"]

ALPHA = 2.0 ** -(MANTISSA_BITS + 1)


def exact_dtype(dtype) -> bool:
    """True when values of ``dtype`` are counted exactly (bool, integers of at most 4 bytes)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "b" or (dtype.kind in "iu" and dtype.itemsize <= 4)


class QuantileSketch:
    """Per-column quantile summary of a stream of blocks (n, n_columns).

    Attributes:
        keys: int64 (n_buckets,) increasing combined keys ``column * COL + HALF + bucket``.
        counts: int64 (n_buckets,) values counted per key (all positive).

    Args:
        n_columns: columns (feature dimensions) summarised.
        exact: count values exactly (see :func:`exact_dtype`) instead of logarithmic buckets.
    """

    def __init__(self, n_columns: int, exact: bool):
        self.n_columns, self.exact = int(n_columns), bool(exact)
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ keys <-> values
    def _values(self, keys: np.ndarray) -> np.ndarray:
        k = keys % _COL - _HALF
        if self.exact:
            return k.astype(np.float64)
        mag = np.abs(k)
        mid = np.where(mag == 0, 0, (mag << _SHIFT) | (np.int64(1) << (_SHIFT - 1))).view(np.float64)
        return np.where(k < 0, -mid, mid)

    # ------------------------------------------------------------------ building
    def add(self, block: np.ndarray) -> None:
        """Count a block (n, n_columns) (or (n,) for one column); NaN and inf are not counted."""
        block = np.asarray(block).reshape(-1, self.n_columns)
        if block.shape[0]:
            self.add_counts(*segment_moments(block, [0], [block.shape[0]], self.exact).counts())

    def add_counts(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """Add ``counts`` (int64, positive) of the combined ``keys`` (int64, any order; see the
        attributes) — the output of :meth:`replaybuf_core.stats.kernels.Segments.counts`."""
        self._combine(keys, np.asarray(counts, dtype=np.int64))

    def _combine(self, keys: np.ndarray, counts: np.ndarray) -> None:
        if not keys.size:
            return
        allk = np.concatenate([self.keys, keys])
        allc = np.concatenate([self.counts, counts])
        self.keys, inv = np.unique(allk, return_inverse=True)
        total = np.zeros(self.keys.size, dtype=np.int64)
        np.add.at(total, inv.ravel(), allc)
        nz = total != 0
        self.keys, self.counts = self.keys[nz], total[nz]

    def _check(self, other: QuantileSketch) -> None:
        if (other.n_columns, other.exact) != (self.n_columns, self.exact):
            raise ValueError("sketches of other columns or mode do not combine")

    def merge(self, other: QuantileSketch) -> None:
        """Add ``other``'s counts (same columns and mode); ValueError otherwise."""
        self._check(other)
        self._combine(other.keys, other.counts)

    def subtract(self, other: QuantileSketch) -> None:
        """Remove ``other``'s counts: the sketch of values that were added to this one (the steps an
        edit deletes).  Exact (integer counts).

        Raises:
            ValueError: other columns or mode, or ``other`` holds values this sketch never counted
                (nothing is changed then).
        """
        self._check(other)
        pos = np.searchsorted(self.keys, other.keys)
        ok = (pos < self.keys.size) & (self.keys[np.minimum(pos, self.keys.size - 1)] == other.keys) \
            if self.keys.size else np.zeros(other.keys.size, dtype=bool)
        if not ok.all() or np.any(self.counts[pos[ok]] < other.counts):
            raise ValueError("subtract: the other sketch counts values this one does not hold")
        counts = self.counts.copy()
        counts[pos] -= other.counts
        nz = counts != 0
        self.keys, self.counts = self.keys[nz], counts[nz]

    def remapped(self, columns, n_columns: int) -> QuantileSketch:
        """A sketch of ``n_columns`` columns holding this one's column ``j`` as column ``columns[j]``
        (int array (n_columns of this sketch,), distinct, in ``[0, n_columns)``): a store's summary
        placed in a wider key (padded feature dimensions count nothing).

        Raises:
            ValueError: ``columns`` of another length or out of range.
        """
        columns = np.asarray(columns, dtype=np.int64).reshape(-1)
        if columns.size != self.n_columns or (columns.size and (columns.min() < 0 or columns.max() >= n_columns)):
            raise ValueError(f"remapped: {columns.size} columns into {n_columns} for a sketch of {self.n_columns}")
        out = QuantileSketch(n_columns, self.exact)
        if self.keys.size:
            keys = columns[self.keys // _COL] * _COL + self.keys % _COL
            order = np.argsort(keys, kind="stable")
            out.keys, out.counts = keys[order], self.counts[order].copy()
        return out

    def inexact(self) -> QuantileSketch:
        """This sketch with logarithmic buckets: an exact sketch's values moved to the buckets floats
        use (each value then reads back within the module's bound), so it merges with float columns."""
        if not self.exact:
            return self
        out = QuantileSketch(self.n_columns, exact=False)
        if self.keys.size:
            cols, values = self.keys // _COL, (self.keys % _COL - _HALF).astype(np.float64)
            mag = np.abs(values).view(np.int64) >> _SHIFT
            bucket = np.where(values < 0, -mag, mag)
            out._combine(cols * _COL + _HALF + bucket, self.counts.copy())
        return out

    # ------------------------------------------------------------------ reading
    def count(self) -> np.ndarray:
        """Values counted per column: int64 (n_columns,)."""
        cols = self.keys // _COL
        return np.bincount(cols, weights=self.counts, minlength=self.n_columns).astype(np.int64)

    def quantile(self, q: float) -> np.ndarray:
        """The ``q`` quantile of each column (float64 (n_columns,)), NaN for a column with no value;
        the rank is ``floor(q (n - 1))`` (``np.quantile``'s ``"lower"``), read within the bound of
        the module docstring."""
        return self.quantiles([q])[0]

    def quantiles(self, qs) -> np.ndarray:
        """:meth:`quantile` of each of ``qs``: float64 (len(qs), n_columns).  Keys are sorted by
        column, then by value (the key mapping is monotonic), so one cumulative sum and one search
        serve every column and quantile.

        Raises:
            ValueError: a ``q`` outside [0, 1].
        """
        qs = np.asarray(qs, dtype=np.float64).reshape(-1)
        if np.any(~((qs >= 0) & (qs <= 1))):
            raise ValueError(f"q must be in [0, 1], got {qs.tolist()}")
        out = np.full((qs.size, self.n_columns), np.nan)
        if not self.keys.size:
            return out
        cols = self.keys // _COL
        first = np.searchsorted(cols, np.arange(self.n_columns), side="left")
        last = np.searchsorted(cols, np.arange(self.n_columns), side="right")
        cum = np.cumsum(self.counts)
        before = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0)
        n = np.where(last > first, cum[np.maximum(last - 1, 0)] - before, 0)
        has = n > 0
        rank = before[has] + np.floor(qs[:, None] * (n[has] - 1)).astype(np.int64)
        idx = np.searchsorted(cum, rank, side="right")
        out[:, has] = self._values(self.keys[idx])
        return out
