"""The import's verification: every stored row read back and compared with the source values.

Exact keys are compared bit for bit (after the proven-lossless uint8 conversion, so
``stored.astype(source dtype)`` is bit-identical to the source); lossy image keys by squared error
(PSNR in dB).  Rows are checked as soon as the writer reports them stored
(:meth:`~replaybuf_core.store.writer.EpisodeWriter.stored_rows`), before their episode commits, so the
source values held for the check are bounded by what the writer has in flight plus
:data:`INFLIGHT_BYTES` — not by the length of an episode.  Keys of at most :data:`WHOLE_KEY_BYTES` in
all (numbers; not a pass-through camera) are kept whole and compared once at the end: their long
chunks would otherwise be decoded again for every part.

Rows are read back in whole chunks (a video chunk of 8 frames is decoded once, not once for each
staged part it overlaps; the rows of a chunk not yet wholly stored wait for it), and on
:data:`CHECK_THREADS` threads beside the importing thread, which goes on staging and writing: each
read-and-compare returns its findings (the first differing part, squared errors, the frames'
histograms), and the importing thread merges them in order — the same problems, PSNR and statistics
as one thread checking in turn.

A *pass-through* key (a camera stored as the source's own packets) that does not read back bit for
bit, or not at all, is not a problem of the store but of the pass-through: :class:`PassThroughMismatch`
is raised on the importing thread, and the import starts again with that camera re-encoded.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from replaybuf_core.stats.kernels import channel_histograms, squared_error_sum
from replaybuf_core.stats.summaries import FRAMES, KeySummary, summarize

from .plan import KeyPlan

#: Keys of at most this many bytes (the whole array) are kept whole and compared once at the end.
WHOLE_KEY_BYTES = 64 * 2**20
#: Bytes of staged source values in checks not yet merged, at most (the importing thread then waits).
INFLIGHT_BYTES = 32 * 2**20
#: Threads reading back and comparing beside the importing thread.
CHECK_THREADS = max(1, min(2, os.cpu_count() or 1))


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


class PassThroughMismatch(Exception):
    """Rows of a pass-through key (``Checker(passthrough=...)``) differ from the source or do not read
    back: ``key``, destination ``episode`` and ``what`` (the rows, the first differing one or the
    read's error)."""

    def __init__(self, key: str, episode: int, what: str):
        super().__init__(f"data/{key}: episode {episode}: {what}")
        self.key, self.episode, self.what = key, episode, what


@dataclass
class _Found:
    """What one read-and-compare found: the first differing part ``(episode, what)``, the squared
    errors of a lossy key's parts ``(episode, sse, values)``, the histograms of a frame key's rows."""

    bad: tuple[int, str] | None = None
    errors: list[tuple[int, float, int]] = field(default_factory=list)
    hist: np.ndarray | None = None


def _first_differing_row(x: np.ndarray, y: np.ndarray) -> int:
    """Index of the first row where ``x`` and ``y`` (equal shapes) differ in bits; -1 for none."""
    for i in range(len(x)):
        if not same_bits(x[i:i + 1], y[i:i + 1]):
            return i
    return -1


class Checker:
    """Compares stored rows with the source values staged for them.

    ``stage(key, start, values, episode)`` hands over the source values of rows
    ``[start, start + len(values))`` of ``key`` (part of destination episode ``episode``);
    ``check(stored)`` starts reading back and comparing every staged row of a key that is stored
    (``stored``: key → rows on storage), in whole chunks, and merges the checks that are done;
    ``wait()`` merges them all; ``check_whole(n_steps, bounds)`` compares the small keys at the end;
    ``close()`` stops the checking threads.  ``problems`` name the key and the episode;
    ``first_bad`` maps each differing key to its first differing episode.

    Args:
        store: the destination backend (its ``read`` is called from the checking threads).
        plans: key → :class:`~replaybuf_core.importing.plan.KeyPlan`.
        passthrough: keys stored as the source's own packets: a difference or a failed read raises
            :class:`PassThroughMismatch` (from ``check`` / ``wait``) instead of being a problem.
        threads: checking threads (0: check on the calling thread, in ``check``).
    """

    def __init__(self, store: Any, plans: dict[str, KeyPlan], passthrough: Any = (), threads: int = CHECK_THREADS):
        self.store = store
        self.plans = plans
        self.passthrough = frozenset(passthrough)
        self.whole = {k: [] for k, p in plans.items() if not p.lossy and k not in self.passthrough
                      and p.shape[0] * int(np.prod(p.shape[1:])) * p.dtype.itemsize <= WHOLE_KEY_BYTES}
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
        self.threads = int(threads)
        self._pool: ThreadPoolExecutor | None = None
        self._running: deque[tuple[str, Future, int]] = deque()  # (key, its check, staged bytes), in order
        self._inflight = 0
        self._readers_made: set[str] = set()
        #: the :class:`PassThroughMismatch` raised, if any
        self.mismatch: PassThroughMismatch | None = None

    def stage(self, key: str, start: int, values: np.ndarray, episode: int) -> None:
        """Keep ``values`` (the source rows ``[start, start + len(values))`` of ``key``, as stored:
        after any uint8 or byte-order conversion) until they are checked."""
        if key in self.whole:
            self.whole[key].append(values)
        else:
            self.pending[key].append((start, values, episode))

    def check(self, stored: dict[str, int]) -> None:
        """Start checking every staged row of a key below ``stored[key]`` (rows on storage) — in whole
        chunks, the last rows of the array excepted — and merge the checks that are done; problems are
        collected, never raised (but see ``passthrough``).  Errors of a read propagate."""
        for key, queue in self.pending.items():
            limit = self._whole_chunks(key, stored.get(key, 0))
            parts = []
            while queue and queue[0][0] < limit:
                start, x, ep = queue[0]
                if start + len(x) > limit:  # the rows of a chunk not wholly stored wait for it
                    queue[0] = (limit, x[limit - start:], ep)
                    parts.append((start, x[:limit - start], ep))
                    break
                parts.append(queue.popleft())
            if parts:
                self._start(key, parts)
        self._merge(wait=False)

    def _whole_chunks(self, key: str, rows: int) -> int:
        p = self.plans[key]
        step = int(p.chunks[0]) if p.chunks else 1
        return rows if rows >= p.shape[0] or step <= 1 else rows - rows % step

    def _start(self, key: str, parts: list[tuple[int, np.ndarray, int]]) -> None:
        if self.threads <= 0:
            self._take(key, self._compare(key, parts))
            return
        if key not in self._readers_made:  # the store's reader of the key made here, not in two threads at once
            self.store.read("data", key, 0, 0)
            self._readers_made.add(key)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="replaybuf-check")
        nbytes = sum(x.nbytes for _, x, _ in parts)
        self._running.append((key, self._pool.submit(self._compare, key, parts), nbytes))
        self._inflight += nbytes
        while self._inflight > INFLIGHT_BYTES:
            self._merge_oldest()

    def _compare(self, key: str, parts: list[tuple[int, np.ndarray, int]]) -> _Found:
        """Read back the rows of ``parts`` (consecutive) at once and compare each part (any thread)."""
        start, stop = parts[0][0], parts[-1][0] + len(parts[-1][1])
        try:
            y = self.store.read("data", key, start, stop)
        except Exception as exc:
            if key not in self.passthrough:
                raise
            return _Found(bad=(parts[0][2], f"rows [{start}, {stop}) do not read back: {exc}"))
        found = _Found()
        if key in self.hist:
            found.hist = np.zeros_like(self.hist[key])
            channel_histograms(y, found.hist)
        for s, x, ep in parts:
            part = y[s - start:s - start + len(x)]
            if key in self.sse:
                found.errors.append((ep, squared_error_sum(part, x), part.size))
            elif found.bad is None and not same_bits(x, part):
                row = s + _first_differing_row(x, part) if x.shape == part.shape else s
                found.bad = (ep, f"rows [{s}, {s + len(x)}) differ from the source (first: row {row})")
        return found

    def _take(self, key: str, found: _Found) -> None:
        """Merge one check's findings (in the order the checks were started)."""
        if found.hist is not None:
            self.hist[key] += found.hist
        for ep, e, n in found.errors:
            self._add_error(key, ep, e, n)
        if found.bad is not None and key not in self.first_bad:
            if key in self.passthrough:
                self.mismatch = PassThroughMismatch(key, *found.bad)
                raise self.mismatch
            self._bad(key, *found.bad)

    def _merge_oldest(self) -> None:
        key, future, nbytes = self._running.popleft()
        self._inflight -= nbytes
        self._take(key, future.result())

    def _merge(self, wait: bool) -> None:
        while self._running and (wait or self._running[0][1].done()):
            self._merge_oldest()

    @contextmanager
    def mismatch_first(self) -> Iterator[None]:
        """Around the writer: an error while unwinding after a :class:`PassThroughMismatch` (the writer
        trimming its uncommitted rows decodes the camera's broken chunk) gives way to the mismatch,
        chained to it, so the import starts again with the camera re-encoded."""
        try:
            yield
        except Exception as exc:
            if self.mismatch is not None and exc is not self.mismatch:
                raise self.mismatch from exc
            raise

    def wait(self) -> None:
        """Merge every check started (waiting for those still running)."""
        self._merge(wait=True)

    def close(self) -> None:
        """Stop the checking threads (checks not yet running are dropped; findings not merged are
        lost: call :meth:`wait` first to keep them)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._running.clear()
        self._inflight = 0

    def _add_error(self, key: str, ep: int, e: float, n: int) -> None:
        self.sse[key] += e
        prev_ep, prev_e, prev_n = self._episode_sse.get(key, (ep, 0.0, 0))
        if prev_ep != ep:  # the previous episode is complete: its PSNR counts towards the worst
            self.worst[key] = min(self.worst[key], psnr_db(prev_e, prev_n))
            prev_e, prev_n = 0.0, 0
        self._episode_sse[key] = (ep, prev_e + e, prev_n + n)

    def finish_lossy(self) -> None:
        """After the last check (and :meth:`wait`): the last episode of each lossy key counts towards
        the worst."""
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
