"""A chunk reader's finalizer may run anywhere the garbage collector does — inside the process-wide
file pool's lock, in the same thread (``FILES.open`` allocating under it).  It took that lock again and
the process hung for ever: CI's 3.13 leg stopped in ``test_import_lerobot_real`` with
``_FilePool.open`` → ``Fetcher.__del__`` → ``release_all`` waiting on the lock its own frame held."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from replaybuf_core import ReplayBuffer


def test_a_readers_finalizer_inside_the_pools_lock_neither_hangs_nor_leaks(tmp_path):
    path = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode({"x": np.arange(40, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)})
    code = textwrap.dedent(f"""
        import gc
        from zarr.storage import LocalStore
        from replaybuf_zarr.fetcher import Fetcher
        from replaybuf_zarr.file_pool import FILES

        store = LocalStore({str(path)!r})
        f = Fetcher(store)
        assert f.get("data/x/zarr.json") is not None  # a file of this reader's in the pool
        before = FILES.open_count()
        cycle = [f]
        cycle.append(cycle)  # freed only by the garbage collector
        del f, cycle
        with FILES._lock:  # as when FILES.open allocates and the collector runs there
            gc.collect()   # the reader's finalizer runs inside the lock, in this thread
        assert FILES.open_count() == before - 1, (before, FILES.open_count())  # its file is let go
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_a_writable_buffers_finalizer_inside_the_lock_registry_neither_hangs_nor_keeps_the_lock(tmp_path):
    """The same for the writer lock: a writable buffer collected inside ``locking``'s registry lock
    (its finalizer releases the store's writer lock) — another writer can open the store after."""
    path = tmp_path / "s.zarr"
    ReplayBuffer.create_empty("zarr", str(path)).close()
    code = textwrap.dedent(f"""
        import gc
        from replaybuf_core import ReplayBuffer, locking

        rb = ReplayBuffer({str(path)!r})
        cycle = [rb]
        cycle.append(cycle)
        del rb, cycle
        with locking._mutex:
            gc.collect()  # the buffer's finalizer releases its writer lock inside the registry's lock
        assert not locking.held_here({str(path)!r})
        ReplayBuffer({str(path)!r}).close()  # the store can be written again
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
