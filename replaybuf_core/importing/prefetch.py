"""Read ahead of a consumer: iterate an iterable in a background thread.

Used by importers so decoding the source (Blosc/zstd, which releases the GIL) overlaps with encoding
the destination on the codec thread pool.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


def prefetch(iterable: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Yield the items of ``iterable``, produced by a background thread up to ``depth`` items ahead.

    An exception raised while producing is re-raised in the consumer at the item where it happened.
    Closing the returned generator early stops the producer (it exits at its next item).
    Memory: at most ``depth`` + 1 items are alive beyond the one being consumed.

    Raises:
        ValueError: ``depth`` < 1.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in iterable:
                if not put((True, item)):
                    return
        except BaseException as exc:  # handed to the consumer
            put((False, exc))
            return
        put(_END)

    thread = threading.Thread(target=produce, name="replaybuf-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            ok, value = item
            if not ok:
                raise value
            yield value
    finally:
        stop.set()
        thread.join(timeout=5)
