"""The process-wide codec thread pool and an order-keeping parallel map over it.

Codecs (imagecodecs WebP, Blosc, zstd) release the GIL, so encoding/decoding many chunks on threads
uses every core.  A task costs ~40 µs to submit, more than decoding a small chunk, so items are
grouped: a few tasks per worker (enough to balance load when other threads compete for the cores).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

PARALLEL_MIN = 8  # fewer items than this run on the calling thread
TASKS_PER_WORKER = 4

_POOL: tuple[int, ThreadPoolExecutor] | None = None


def codec_pool() -> ThreadPoolExecutor:
    """The pool (one thread per CPU); rebuilt after a fork, whose child has none of the parent's threads."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1),
                                                 thread_name_prefix="replaybuf-codec"))
    return _POOL[1]


def parallel_map(fn: Callable[..., Any], *columns: Sequence[Any]) -> list[Any]:
    """``[fn(*row) for row in zip(*columns)]``, computed on the codec pool when there are many rows;
    results keep the input order; the first exception raised by ``fn`` propagates."""
    n = len(columns[0])
    workers = os.cpu_count() or 1
    if n < PARALLEL_MIN or workers < 2:
        return [fn(*row) for row in zip(*columns)]
    n_tasks = min(n, workers * TASKS_PER_WORKER)
    groups = [list(zip(*(c[i::n_tasks] for c in columns))) for i in range(n_tasks)]
    done = list(codec_pool().map(lambda rows: [fn(*r) for r in rows], groups))
    out: list[Any] = [None] * n
    for i, part in enumerate(done):
        out[i::n_tasks] = part
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
    workers = os.cpu_count() or 1
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
