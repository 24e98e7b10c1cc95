"""numba, for the project's compiled kernels, with numba's compiler lock held across ``fork()``.

Every module with ``@numba.njit`` kernels imports numba from here (``from replaybuf_core.compiled
import numba``).  numba compiles a kernel (or loads its on-disk cache) on the first call, under one
process-wide lock (``numba.core.compiler_lock.global_compiler_lock``, a re-entrant lock).  A process
forked while another of its threads holds that lock — a DataLoader forking its workers while a
prefetch thread's first batch compiles — gives the child a lock held by a thread the child does not
have: the child's first kernel call waits for ever.  So, registered once with
:func:`os.register_at_fork`, the forking thread takes the lock before the fork (waiting for a compile
under way to end) and releases it afterwards in the parent and in the child, where the forking thread
is the one that holds it.  The hooks only take and release a lock; they free nothing (no native object
may be freed in an at-fork hook).
"""

from __future__ import annotations

import os

import numba
from numba.core.compiler_lock import global_compiler_lock

__all__ = ["numba"]


def _before_fork() -> None:
    global_compiler_lock.acquire()


def _after_fork() -> None:
    global_compiler_lock.release()


if hasattr(os, "register_at_fork"):  # (POSIX; this module is imported once a process)
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
