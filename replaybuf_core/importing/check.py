"""The import's verification: every stored row read back and compared with the source values.

Exact keys are compared bit for bit (after the proven-lossless uint8 conversion, so
``stored.astype(source dtype)`` is bit-identical to the source); lossy image keys by squared error
(PSNR in dB).  Rows are checked as soon as the writer reports them stored
(:meth:`~replaybuf_core.store.writer.EpisodeWriter.stored_rows`), before their episode commits, so the
source values held for the check are bounded by what the writer has in flight — not by the
length of an episode.  Keys of at most :data:`WHOLE_KEY_BYTES` in all (numbers) are kept whole and
compared once at the end: their long chunks would otherwise be decoded again for every part.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable

import numpy as np

from replaybuf_core.stats.kernels import channel_histograms
from replaybuf_core.stats.summaries import FRAMES, KeySummary, summarize

from .plan import KeyPlan

#: Keys of at most this many bytes (the whole array) are kept whole and compared once at the end.
WHOLE_KEY_BYTES = 64 * 2**20


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal shape, dtype and bits (NaN and -0.0 included); strings compare as values."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype == object:
        return bool(np.array_equal(x, y))
    if x.size == 0:
        return True
    return bool(np.array_equal(_as_bytes(x), _as_bytes(y)))


def _as_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def psnr_db(sse: float, count: int) -> float:
    """PSNR (dB) of 8-bit values from the sum of squared errors over ``count`` values; inf when equal."""
    if count == 0 or sse == 0:
        return math.inf
    return 10.0 * math.log10(255.0 ** 2 / (sse / count))


class Checker:
    """Compares stored rows with the source values staged for them.

    ``stage(key, start, values, episode)`` hands over the source values of rows
    ``[start, start + len(values))`` of ``key`` (part of destination episode ``episode``);
    ``check(stored)`` reads back and compares every staged part whose rows are all stored
    (``stored``: key → rows on storage); ``check_whole(n_steps, bounds)`` compares the small keys at
    the end.  ``problems`` name the key and the episode; ``first_bad`` maps each differing key to
    its first differing episode.
    """

    def __init__(self, store: Any, plans: dict[str, KeyPlan]):
        self.store = store
        self.plans = plans
        self.whole = {k: [] for k, p in plans.items()
                      if not p.lossy and p.shape[0] * int(np.prod(p.shape[1:])) * p.dtype.itemsize <= WHOLE_KEY_BYTES}
        self.pending: dict[str, deque] = {k: deque() for k in plans if k not in self.whole}
        self.first_bad: dict[str, int] = {}
        self.problems: list[str] = []
        self.sse = {k: 0.0 for k, p in plans.items() if p.lossy}
        self.worst = {k: math.inf for k in self.sse}
        self._episode_sse: dict[str, tuple[int, float, int]] = {}
        #: per frame key, the channel histograms of every stored row read back (the statistics' own
        #: summary of frames: :meth:`stats_summarizer` saves the post-import statistics a second read)
        self.hist = {k: KeySummary.for_array(p.dtype, p.shape).hist for k, p in plans.items()
                     if KeySummary.for_array(p.dtype, p.shape).kind == FRAMES}

    def stage(self, key: str, start: int, values: np.ndarray, episode: int) -> None:
        """Keep ``values`` (the source rows ``[start, start + len(values))`` of ``key``, as stored:
        after any uint8 or byte-order conversion) until they are checked."""
        if key in self.whole:
            self.whole[key].append(values)
        else:
            self.pending[key].append((start, values, episode))

    def check(self, stored: dict[str, int]) -> None:
        """Read back and compare every staged part of a key whose rows are all below
        ``stored[key]`` (rows on storage); problems are collected, never raised."""
        for key, queue in self.pending.items():
            limit = stored.get(key, 0)
            while queue and queue[0][0] + len(queue[0][1]) <= limit:
                start, x, ep = queue.popleft()
                y = self.store.read("data", key, start, start + len(x))
                if key in self.hist:
                    channel_histograms(y, self.hist[key])
                if key in self.sse:
                    self._add_error(key, ep, x, y)
                elif key not in self.first_bad and not same_bits(x, y):
                    self._bad(key, ep, f"rows [{start}, {start + len(x)}) differ from the source")

    def _add_error(self, key: str, ep: int, x: np.ndarray, y: np.ndarray) -> None:
        e = float(np.sum((y.astype(np.float64) - x.astype(np.float64)) ** 2))
        self.sse[key] += e
        prev_ep, prev_e, prev_n = self._episode_sse.get(key, (ep, 0.0, 0))
        if prev_ep != ep:  # the previous episode is complete: its PSNR counts towards the worst
            self.worst[key] = min(self.worst[key], psnr_db(prev_e, prev_n))
            prev_e, prev_n = 0.0, 0
        self._episode_sse[key] = (ep, prev_e + e, prev_n + y.size)

    def finish_lossy(self) -> None:
        """After the last check: the last episode of each lossy key counts towards the worst."""
        for key, (_, e, n) in self._episode_sse.items():
            self.worst[key] = min(self.worst[key], psnr_db(e, n))
        self._episode_sse.clear()

    def _bad(self, key: str, ep: int, what: str) -> None:
        self.first_bad[key] = ep
        self.problems.append(f"data/{key}: episode {ep}: {what}")

    def unchecked(self) -> dict[str, int]:
        """key → staged rows never compared (they were never reported stored)."""
        return {k: sum(len(x) for _, x, _ in q) for k, q in self.pending.items() if q}

    def check_whole(self, n_steps: int, bounds: list[tuple[int, int, int]]) -> None:
        """Compare each small key whole; ``bounds``: ``(episode, start, stop)`` of every episode, to
        name the first that differs."""
        for key, parts in self.whole.items():
            p = self.plans[key]
            x = np.concatenate(parts) if parts else np.empty((0,) + p.shape[1:], p.dtype)
            y = self.store.read("data", key, 0, n_steps)
            if key in self.hist:
                channel_histograms(y, self.hist[key])
            if same_bits(x, y):
                continue
            for ep, start, stop in bounds:
                if stop > len(y) or stop > len(x) or not same_bits(x[start:stop], y[start:stop]):
                    self._bad(key, ep, f"rows [{start}, {stop}) differ from the source")
                    break
            else:
                self._bad(key, bounds[-1][0] if bounds else 0, f"{len(y)} rows stored, {len(x)} in the source")

    def stats_summarizer(self) -> Callable[[Any, list[str], int, int], dict[str, KeySummary]]:
        """A ``summarizer`` for :meth:`ReplayBuffer.get_stats` right after a verified import: each frame
        key's summary (its channel histograms) is the one made from the rows read back here, the other
        keys are read and summarised as usual — the same statistics, bit for bit, without decoding every
        frame a second time.  Only for a whole buffer (episodes ``0..n``) every row of which was checked
        (``unchecked()`` empty); otherwise it summarises as usual."""

        def summarize_import(buffer: Any, keys: list[str], first: int, stop: int) -> dict[str, KeySummary]:
            out: dict[str, KeySummary] = {}
            if first == 0 and stop == buffer.n_episodes and not self.unchecked():
                ends = np.asarray(buffer.episode_ends[:stop], dtype=np.int64)
                for key in keys:
                    if key in self.hist:
                        p = self.plans[key]
                        out[key] = KeySummary.for_array(p.dtype, (int(ends[-1]) if stop else 0,) + p.shape[1:])
                        out[key].lengths = np.diff(np.r_[0, ends])
                        out[key].hist = self.hist[key].copy()
            rest = [k for k in keys if k not in out]
            if rest:
                out.update(summarize(buffer, rest, first, stop))
            return out

        return summarize_import
