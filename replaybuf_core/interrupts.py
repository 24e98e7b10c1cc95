"""Hold Ctrl-C (SIGINT) back while bookkeeping must not be cut in half.

``KeyboardInterrupt`` can be raised between any two bytecodes; an ``EpisodeWriter`` interrupted
between staging one key and the next, or between committing episode ends and forgetting them, would
save keys misaligned or an episode twice; a backend's write interrupted while it waits for its IO
threads (zarr-python's event loop, the codec pool) would go on landing after the interrupt, under
whatever cleans up after it (a build beside being removed, a temporary array being deleted), so the
zarr backend runs each mutating call inside this too.  Inside :func:`deferred_sigint` a Ctrl-C is only recorded,
and raised as ``KeyboardInterrupt`` (through the handler that was installed before) when the block
ends — so every episode already handed over is kept, as the writer promises.  SIGTERM is held the same
way whenever a Python handler is installed for it (the ``replaybuf`` CLI raises it like Ctrl-C).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0  # nesting on the main thread: only the outermost block installs and restores
#: Deferred when a Python handler is installed for them: SIGINT (Ctrl-C) and SIGTERM (the CLI turns it
#: into an interrupt like Ctrl-C, so it must not cut bookkeeping in half either).
DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Run the block with SIGINT (and a Python-handled SIGTERM) deferred to its end (main thread only: elsewhere, and when another
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
    previous = {sig: signal.getsignal(sig) for sig in DEFERRED_SIGNALS}
    previous = {sig: h for sig, h in previous.items() if callable(h)}
    if not previous:  # SIG_IGN / SIG_DFL / None: nothing raises KeyboardInterrupt anyway
        yield
        return
    received: list[tuple[int, object]] = []
    for sig in previous:
        signal.signal(sig, lambda signum, frame: received.append((signum, frame)))
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            signum, frame = received[0]
            previous[signum](signum, frame)  # SIGINT's default handler raises KeyboardInterrupt here
