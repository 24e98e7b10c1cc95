"""How long a hand-over registry (:mod:`.video_packets`, :mod:`.image_bytes`) keeps its records: while
an import's session is open in this process.  Imports running side by side (threads) each open one;
the registry is cleared when the last one ends.  A forked child starts with none open (the counter and
its lock are made anew: another thread may have held the lock at the fork; nothing native is freed)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["ImportSessions"]


class ImportSessions:
    """The open import sessions of one registry; ``clear`` (no arguments) empties the registry when
    the last session ends.  ``bool(sessions)``: a session is open (a registry records only then)."""

    def __init__(self, clear: Callable[[], None]):
        self._clear = clear
        self._lock = threading.Lock()
        self._open = 0
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def __bool__(self) -> bool:
        return self._open > 0

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep the registry's records until this session ends (and no other is open)."""
        with self._lock:
            self._open += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                last = self._open == 0
            if last:
                self._clear()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
