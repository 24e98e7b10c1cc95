"""The process-wide codec thread pool, an order-keeping parallel map and a background map over it.

Codecs (imagecodecs WebP, Blosc, zstd) release the GIL, so encoding/decoding many chunks on threads
uses every core.  :func:`parallel_map` shares rows between the calling thread and pool helpers (the
caller never sits idle waiting for a helper to wake up); :func:`submit_map` starts a map and returns
a future (the write path encodes the next shard while the caller stages more episodes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

PARALLEL_MIN = 8  # fewer items than this run on the calling thread


def _codec_threads() -> int:
    """Threads of the pool: ``REPLAYBUF_CODEC_THREADS`` when set (a Dask worker per core sets 1),
    else one per CPU."""
    text = os.environ.get("REPLAYBUF_CODEC_THREADS", "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            raise ValueError(f"REPLAYBUF_CODEC_THREADS must be an integer, got {text!r}") from None
    return max(1, os.cpu_count() or 1)


_CPUS = _codec_threads()
TASKS_PER_WORKER = 4

_POOL: tuple[int, ThreadPoolExecutor] | None = None


def codec_pool() -> ThreadPoolExecutor:
    """The pool (one thread per CPU, or ``REPLAYBUF_CODEC_THREADS``); rebuilt after a fork, whose child has none of the parent's threads."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=_CPUS,
                                                 thread_name_prefix="replaybuf-codec"))
    return _POOL[1]


#: shared maps with items left to take, oldest first (an ordered set): what a joining thread may help with
_LIVE: dict[SharedMap, None] = {}
_LIVE_LOCK = threading.Lock()
_STEALING = threading.local()


def _after_fork_in_child() -> None:
    """A forked child gets a free lock (a parent thread may have held it at the fork); the parent's
    maps stay in ``_LIVE`` until a join of the child skips and drops them (nothing is freed here)."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_after_fork_in_child)


class SharedMap:
    """``[fn(x) for x in items]`` computed by pool helpers started now and by whoever calls
    :meth:`join` later: each takes a few items at a time from a shared counter until none is left.

    The caller can do other work between creating it and ``join()`` (the sampler reads the other
    keys while helpers decode frames); ``join`` then takes the items still left, waits only for the
    items a helper is computing, and returns the results in input order (or raises the first error).
    A helper slow to start (a sleeping vCPU, a pool busy with background writes) costs nothing — the
    caller takes its share — and joining from a pool thread cannot deadlock.

    ``share=True`` marks items that are CPU work of a few ms each (decoding local chunks): while a
    ``join`` on a thread other than the main thread waits for a helper's last items, it computes
    items of the oldest such map of this process that still has some (a loader's prefetch thread:
    the next batch, started before this one was finished), so that thread never idles while there
    is decoding to do.  A stolen item's error stays with its own map (raised by that map's
    ``join``).  The main thread never helps: a Ctrl-C (delivered to it only) must not land inside
    another map's item, and a reader on it is never held back by another thread's decodes.  Maps
    of other work (object-store fetches that wait on the network) are never computed by other joins.
    """

    def __init__(self, fn: Callable[[Any], Any], items: Sequence[Any], helpers: int, share: bool = False):
        self._fn, self._items = fn, items
        n = len(items)
        self._out: list[Any] = [None] * n
        self._errors: list[BaseException] = []
        self._next = 0
        self._running = 0
        self._grab = max(1, min(4, n // (8 * _CPUS)))  # items per take: fewer lock round trips
        # entered as the plain lock (its __enter__ is C): a Ctrl-C inside Condition.__enter__ (Python
        # code) could land after the acquire and before the with block, leaving the lock held and
        # every helper waiting on it for ever — and the interpreter's exit joining them
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pid = os.getpid()
        if n and share:
            with _LIVE_LOCK:
                _LIVE[self] = None
        pool = codec_pool()
        for _ in range(min(helpers, n)):
            pool.submit(self._work)

    def _work(self, once: bool = False) -> bool:
        """Take and compute items until none is left (``once``: one item); True when it took any."""
        fn, items, out, n = self._fn, self._items, self._out, len(self._items)
        took = False
        while True:
            with self._lock:
                if self._errors or self._next >= n or (once and took):
                    done = not once or not took
                    break
                lo = self._next
                hi = self._next = min(n, lo + (1 if once else self._grab))
                self._running += 1
            took = True
            try:
                for i in range(lo, hi):
                    out[i] = fn(items[i])
            except BaseException as exc:  # re-raised by join()
                self._errors.append(exc)
            finally:
                with self._lock:
                    self._running -= 1
                    self._cond.notify_all()
        if done and self in _LIVE:
            with _LIVE_LOCK:
                _LIVE.pop(self, None)
        return took

    def _help_others(self) -> None:
        """While this map's helpers compute its last items, compute items of other shared maps of
        this process (the oldest first), one item at a time; not on the main thread, and never
        nested (a stolen item that joins a map of its own waits for it plainly)."""
        if getattr(_STEALING, "on", False) or threading.current_thread() is threading.main_thread():
            return
        _STEALING.on = True
        try:
            while True:
                with self._lock:
                    if self._running == 0:
                        return
                other = None
                with _LIVE_LOCK:
                    for m in list(_LIVE):
                        if m._pid != self._pid:  # a parent's, inherited by this forked child: not ours
                            del _LIVE[m]
                        elif m is not self:
                            other = m
                            break
                if other is None:
                    return
                other._work(once=True)  # (a map with nothing left to take leaves _LIVE)
        finally:
            _STEALING.on = False

    def join(self) -> list[Any]:
        """Compute what is left (then, while helpers finish, other maps' items), wait for the items
        being computed; the results (or the first error)."""
        self._work()
        self._help_others()
        with self._lock:
            self._cond.wait_for(lambda: self._running == 0)
        if self._errors:
            raise self._errors[0]
        return self._out


def parallel_map(fn: Callable[..., Any], *columns: Sequence[Any]) -> list[Any]:
    """``[fn(*row) for row in zip(*columns)]``, computed on the codec pool when there are many rows;
    results keep the input order; the first exception raised by ``fn`` propagates.

    The calling thread works too, with ``cpus - 1`` pool helpers (:class:`SharedMap`).
    """
    n = len(columns[0])
    if n < PARALLEL_MIN or _CPUS < 2:
        return [fn(*row) for row in zip(*columns)]
    rows = list(zip(*columns))
    return SharedMap(lambda row: fn(*row), rows, _CPUS - 1).join()


def submit_map(fn: Callable[[Any], Any], items: Sequence[Any], finish: Callable[[list[Any]], Any]) -> Future:
    """Start ``finish([fn(x) for x in items])`` without waiting: ``fn`` runs on the codec pool in a
    few tasks per worker, and the task that completes last calls ``finish`` with the results in
    input order.  Returns a ``Future`` holding ``finish``'s result, or the first exception raised by
    ``fn`` (``finish`` is then not called) or by ``finish``.  With few items (or one CPU) everything
    runs on the calling thread and the returned future is already done.

    ``finish`` runs on a pool thread: it must not wait for other pool tasks.
    """
    future: Future = Future()
    n = len(items)
    workers = _CPUS
    if n < PARALLEL_MIN or workers < 2:
        try:
            future.set_result(finish([fn(x) for x in items]))
        except Exception as exc:  # handed to whoever waits on the future (Ctrl-C propagates)
            future.set_exception(exc)
        return future
    n_tasks = min(n, workers * TASKS_PER_WORKER)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    remaining = [n_tasks]
    lock = threading.Lock()

    def run(first: int) -> None:
        try:
            for i in range(first, n, n_tasks):
                results[i] = fn(items[i])
        except BaseException as exc:
            errors.append(exc)
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if not last:
            return
        if errors:
            future.set_exception(errors[0])
            return
        try:
            future.set_result(finish(results))
        except BaseException as exc:
            future.set_exception(exc)

    pool = codec_pool()
    for t in range(n_tasks):
        pool.submit(run, t)
    return future
