"""The order of an epoch: position ``p`` -> (source, window of that source), computed in O(1) per
position from ``(seed, epoch, p)`` alone; and which positions a rank's batches hold.

**Every window once** (every source weighted ``"size"``): the sources' windows are numbered one after
another (``N = sum N_s``) and position ``p`` holds window ``block_shuffle(p)`` of that numbering
(:mod:`.permutation`): each epoch a permutation of all windows of all stores.

**Weighted**: positions are cut into slot blocks of ``M`` positions (a power of two, >= 4096, raised
until every source has a slot).  Source ``s`` owns ``c_s`` slots of every block (``sum c_s = M``,
``c_s ~ M w_s`` by largest remainders; :attr:`EpochOrder.probabilities` gives ``c_s / M``), placed
by a permutation of the block's slots keyed by the block number.  Draw ``k`` of source ``s``
(``k = block * c_s +`` the slot's rank among the block's slots of ``s``, known in O(1)) is its window
``block_shuffle(k mod N_s)`` keyed by ``k // N_s``: in draw order a store is drawn without
replacement until every window came once, then again in a fresh order; positions follow draw order
up to the shuffle inside a slot block, so after any whole number of slot blocks each window of a
store came equally often, within one — a small store upsampled by its weight repeats evenly.

**Ranks** (:func:`rank_batches`): global batch ``j`` holds positions ``[start + j G, start + (j + 1)
G)`` with ``G = world_size * batch_size``; rank ``r`` takes its ``r``-th slice of ``batch_size``.  The
stream of positions depends on ``(seed, epoch, start)`` only, never on the world size: concatenating
the ranks' batches in rank order gives the same sequence on 1 or 64 GPUs (elastic determinism).
"""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from .permutation import block_shuffle, derive_key, feistel

__all__ = ["EpochOrder", "rank_batches", "rank_batch_positions"]

#: slot blocks of the weighted order start at this many positions (a power of two)
MIN_SLOTS = 1 << 12
#: ... and grow (doubling) up to this many until every source has a slot
MAX_SLOTS = 1 << 24


def _apportion(weights: np.ndarray, m: int) -> np.ndarray:
    """Largest-remainder apportionment of ``m`` slots by ``weights`` (ties: the earlier source)."""
    exact = weights / weights.sum() * m
    base = np.floor(exact).astype(np.int64)
    left = m - int(base.sum())
    order = np.lexsort((np.arange(len(weights)), -(exact - base)))
    base[order[:left]] += 1
    return base


def _check_int(name: str, value, low: int = 0) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


class EpochOrder:
    """Positions of an epoch -> (source, window), see the module docstring.

    Args:
        n_windows: windows per source (>= 0 each).
        weights: per-source weights (> 0) for the weighted order; None for every window once.
        seed: any int; the order depends on ``(seed, epoch)`` only.
        block, span: the block shuffle's locality (:func:`~.permutation.block_shuffle`): ``block=1``
            (default) a plain random order; ``block=K, span=S``: ``S`` runs of ``K`` neighbouring
            windows at a time (streaming reads touch few shards).
        samples_per_epoch: positions per epoch; default the number of windows (required > 0 when
            weighted).
        names: source names for errors.

    Raises:
        ValueError: no window at all, a weighted source without windows, a weight too small for
            ``MAX_SLOTS`` slots, a negative count, bad ``block`` / ``span`` / ``samples_per_epoch``.
    """

    def __init__(self, n_windows: Sequence[int], weights: Sequence[float] | None, seed: int, *,
                 block: int = 1, span: int | None = None, samples_per_epoch: int | None = None,
                 names: Sequence[str] | None = None):
        self.n_windows = np.asarray([_check_int("window count", n) for n in n_windows], dtype=np.int64)
        # the compiled permutation kernel is loaded here, before a DataLoader forks its workers (a
        # child must not find numba's compiler lock held by a thread of the parent it does not have)
        feistel(np.zeros(1, np.int64), 2, 0)
        self.names = list(names) if names is not None else [f"#{i}" for i in range(len(self.n_windows))]
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.seed = int(seed)
        self.block = _check_int("block", block, 1)
        self.span = None if span is None else _check_int("span", span, 1)
        self.offsets = np.concatenate([[0], np.cumsum(self.n_windows)]).astype(np.int64)
        self.total = int(self.offsets[-1])
        if self.total == 0:
            raise ValueError(f"the mixture has no windows: every source ({', '.join(self.names)}) is empty")
        self.weighted = weights is not None
        if self.weighted:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != self.n_windows.shape or not np.all(np.isfinite(w) & (w > 0)):
                raise ValueError(f"weights must be finite and > 0, one per source, got {list(weights)}")
            empty = [n for n, c in zip(self.names, self.n_windows) if c == 0]
            if empty:
                raise ValueError(f"source {empty[0]!r} has a weight but no windows (no episode long enough)")
            m = MIN_SLOTS
            counts = _apportion(w, m)
            while counts.min() == 0 and m < MAX_SLOTS:
                m *= 2
                counts = _apportion(w, m)
            if counts.min() == 0:
                i = int(np.argmin(counts))
                raise ValueError(f"source {self.names[i]!r}: weight {w[i] / w.sum():.3g} of the total is below "
                                 f"1/{MAX_SLOTS} and gets no sample")
            self.slots, self.slot_counts = m, counts
            self.slot_ends = np.cumsum(counts).astype(np.int64)
            self.probabilities = counts / m
        else:
            self.slots, self.slot_counts, self.slot_ends = 0, None, None
            self.probabilities = self.n_windows / self.total
        n = self.total if samples_per_epoch is None else _check_int("samples_per_epoch", samples_per_epoch, 1)
        self.length = int(n)
        if not self.weighted and self.length != self.total:
            raise ValueError(f"samples_per_epoch={self.length}: an epoch of every window once has {self.total} "
                             "samples; give the sources numeric weights to draw another number")

    def describe(self) -> dict:
        """The parameters the order depends on (for the mixture's definition hash)."""
        return {"n_windows": self.n_windows.tolist(), "weighted": self.weighted, "seed": self.seed,
                "block": self.block, "span": self.span, "length": self.length,
                "slots": self.slots, "slot_counts": None if self.slot_counts is None else self.slot_counts.tolist()}

    def locate(self, epoch: int, positions) -> tuple[np.ndarray, np.ndarray]:
        """``(source, window)`` int64 arrays for ``positions`` (int array-like in ``[0, length)``)
        of epoch ``epoch`` (int >= 0).

        Raises:
            ValueError: a position outside ``[0, length)`` or a bad epoch.
        """
        epoch = _check_int("epoch", epoch)
        p = np.asarray(positions, dtype=np.int64).reshape(-1)
        if p.size and (int(p.min()) < 0 or int(p.max()) >= self.length):
            raise ValueError(f"positions must be in [0, {self.length}), got {int(p.min())}..{int(p.max())}")
        if not self.weighted:
            w = block_shuffle(p, self.total, derive_key(self.seed, epoch, 0), self.block, self.span)
            source = np.searchsorted(self.offsets, w, side="right") - 1
            return source, w - self.offsets[source]
        m = self.slots
        blk = p // m
        slot = np.empty_like(p)
        for b in np.unique(blk):
            sel = blk == b
            slot[sel] = block_shuffle(p[sel] - int(b) * m, m, derive_key(self.seed, epoch, 1, int(b)))
        source = np.searchsorted(self.slot_ends, slot, side="right")
        draw = blk * self.slot_counts[source] + slot - (self.slot_ends[source] - self.slot_counts[source])
        n = self.n_windows[source]
        cycle, j = draw // n, draw % n
        window = np.empty_like(p)
        for s, c in set(zip(source.tolist(), cycle.tolist())):
            sel = (source == s) & (cycle == c)
            window[sel] = block_shuffle(j[sel], int(self.n_windows[s]), derive_key(self.seed, epoch, 2, s, c),
                                        self.block, self.span)
        return source, window


def rank_batches(length: int, start: int, world_size: int, rank: int, batch_size: int, drop_last: bool) -> int:
    """How many batches rank ``rank`` of ``world_size`` gets from position ``start`` of an epoch of
    ``length`` positions (see the module docstring).  With ``drop_last`` every rank gets the number
    of full global batches; without it, a rank whose slice of the last global batch is empty gets
    one batch fewer, and the last non-empty slice may be short."""
    g = world_size * batch_size
    left = max(length - start, 0)
    if drop_last:
        return left // g
    mine = left - rank * batch_size
    return max(0, -(-mine // g))


def rank_batch_positions(length: int, start: int, world_size: int, rank: int, batch_size: int, j: int) -> np.ndarray:
    """int64 positions of rank ``rank``'s batch ``j`` (an empty array past the epoch)."""
    a = start + j * world_size * batch_size + rank * batch_size
    return np.arange(a, min(a + batch_size, length), dtype=np.int64)
