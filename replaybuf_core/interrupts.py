"""Hold Ctrl-C (SIGINT) back while bookkeeping must not be cut in half.

``KeyboardInterrupt`` can be raised between any two bytecodes; an ``EpisodeWriter`` interrupted
between staging one key and the next, or between committing episode ends and forgetting them, would
save keys misaligned or an episode twice.  Inside :func:`deferred_sigint` a Ctrl-C is only recorded,
and raised as ``KeyboardInterrupt`` (through the handler that was installed before) when the block
ends — so every episode already handed over is kept, as the writer promises.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0  # nesting on the main thread: only the outermost block installs and restores


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Run the block with SIGINT deferred to its end (main thread only: elsewhere, and when another
    library has replaced the handler with a non-callable one, the block runs unchanged)."""
    global _depth
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    if _depth:  # nested: the outermost block defers and re-raises
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIG_IGN / SIG_DFL / None: nothing raises KeyboardInterrupt anyway
        yield
        return
    received: list[tuple[int, object]] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        signal.signal(signal.SIGINT, previous)
        if received:
            previous(*received[0])  # the default handler raises KeyboardInterrupt here
