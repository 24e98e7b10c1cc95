"""Kill this process (SIGKILL, by itself) right after its N-th file operation that changes a store,
so a kill trial lands *between* two steps of a commit — an instant a kill at a random time rarely
hits (most of an edit's time is spent computing, not between two writes).

The operations counted are the ones that change a store's structure on local disk: ``os.replace``
and ``os.rename`` of a metadata file (:data:`METADATA_FILES`; zarr-python's ``LocalStore`` commits a
file as a temporary file, then a rename: a resize, an attribute write, a new array), and
``os.unlink`` / ``os.remove`` / ``os.rmdir`` (deletions; ``shutil.rmtree`` calls them).  Used by :mod:`replaybuf_core.testing.crash` when :data:`ENV` is set.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

#: environment variable: kill after this many counted file operations (unset: never)
ENV = "REPLAYBUF_KILL_AFTER_FILE_OPS"

_VERBS = ("replace", "rename", "unlink", "remove", "rmdir")
#: the files whose renames count (zarr v3 and v2 metadata): chunk writes are left to kills at random
#: instants, which land among them far more often than between two metadata writes
METADATA_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup"})


class FileOpKiller:
    """Counts the file operations (module docstring) once :meth:`start` is called and SIGKILLs the
    process right after the ``n_kill``-th (``n_kill`` >= 1).  :attr:`count`: how many so far."""

    def __init__(self, n_kill: int):
        if int(n_kill) < 1:
            raise ValueError(f"{ENV} must be at least 1, got {n_kill!r}")
        self.n_kill, self.count, self._on = int(n_kill), 0, False
        self._lock = threading.Lock()
        for verb in _VERBS:
            setattr(os, verb, self._counted(getattr(os, verb)))

    def start(self) -> None:
        """Count from now on (the process's own start-up — opening the store, taking its lock — is not
        the operation on trial)."""
        self._on = True

    def _counted(self, plain: Callable[..., Any]) -> Callable[..., Any]:
        renames = plain.__name__ in ("replace", "rename")

        def op(*args: Any, **kwargs: Any) -> Any:
            out = plain(*args, **kwargs)
            if self._on and (not renames or os.path.basename(os.fspath(args[1])) in METADATA_FILES):
                with self._lock:
                    self.count += 1
                    if self.count == self.n_kill:
                        os.kill(os.getpid(), signal.SIGKILL)
            return out

        return op


def from_environment() -> FileOpKiller | None:
    """The killer :data:`ENV` asks for (installed, not yet started), or None when it is unset."""
    value = os.environ.get(ENV)
    return FileOpKiller(int(value)) if value else None
