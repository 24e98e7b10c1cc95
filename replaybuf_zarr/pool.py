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
_CPUS = max(1, os.cpu_count() or 1)
TASKS_PER_WORKER = 4

_POOL: tuple[int, ThreadPoolExecutor] | None = None


def codec_pool() -> ThreadPoolExecutor:
    """The pool (one thread per CPU); rebuilt after a fork, whose child has none of the parent's threads."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=_CPUS,
                                                 thread_name_prefix="replaybuf-codec"))
    return _POOL[1]


def parallel_map(fn: Callable[..., Any], *columns: Sequence[Any]) -> list[Any]:
    """``[fn(*row) for row in zip(*columns)]``, computed on the codec pool when there are many rows;
    results keep the input order; the first exception raised by ``fn`` propagates.

    The calling thread works too: it and up to ``cpus - 1`` pool helpers take rows one at a time
    from a shared counter until none is left, and the caller waits only for rows already taken.
    So a helper that is slow to start (a sleeping vCPU, a pool busy with a background write) costs
    nothing — the caller takes its share — and calling this from a pool thread cannot deadlock.
    """
    n = len(columns[0])
    workers = _CPUS
    if n < PARALLEL_MIN or workers < 2:
        return [fn(*row) for row in zip(*columns)]
    out: list[Any] = [None] * n
    errors: list[BaseException] = []
    state = [0, 0]  # next row to hand out, rows being computed
    cond = threading.Condition()

    def work() -> None:
        while True:
            with cond:
                if errors or state[0] >= n:
                    return
                i = state[0]
                state[0] += 1
                state[1] += 1
            try:
                out[i] = fn(*(c[i] for c in columns))
            except BaseException as exc:  # re-raised by the caller
                errors.append(exc)
            finally:
                with cond:
                    state[1] -= 1
                    cond.notify_all()

    pool = codec_pool()
    for _ in range(min(workers - 1, n - 1)):
        pool.submit(work)
    work()
    with cond:  # rows a helper took may still be running
        cond.wait_for(lambda: state[1] == 0)
    if errors:
        raise errors[0]
    return out


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
        except BaseException as exc:  # handed to whoever waits on the future
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
