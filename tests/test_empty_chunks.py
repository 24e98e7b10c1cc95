"""Every chunk of a zarr store is written, even one equal to the fill value, whatever other threads of
the process do with zarr's process-wide config.  A threaded SIGSTOP trial on s3:// (two writers in one
process) once ended with ``verify`` saying chunk 0 of ``data/obs`` was missing: an all-zero chunk
rewritten through zarr-python (a write not covering whole chunks, the path every object-store write
takes) was deleted, as zarr does with ``write_empty_chunks`` off.  The backend had turned the setting on
for its opens through zarr's process-wide config, and one thread leaving its ``zarr.config.set`` block
turned it off again under another thread's open."""

from __future__ import annotations

import threading
import time

import numpy as np
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.inspection.verify import verify_store


def test_all_zero_chunks_are_stored_while_another_thread_sets_zarr_config(tmp_path):
    stop = threading.Event()

    def toggle() -> None:  # another library (or thread) in the process using zarr's config, as it may
        while not stop.is_set():
            with zarr.config.set({"array.write_empty_chunks": False}):
                time.sleep(0.001)  # its exit restores what it found, whatever others set meanwhile

    toggler = threading.Thread(target=toggle, daemon=True)
    toggler.start()
    try:
        for i in range(12):
            path = tmp_path / f"{i}.zarr"
            rb = ReplayBuffer.create_empty_zarr()
            rb.add_episode({"obs": np.ones((8, 3), np.float32)})
            rb.save_to_path(path)
            with ReplayBuffer(path) as rb:
                arr = rb.store.get_array("data", "obs")  # the handle the backend writes through
                arr[:] = 0  # zarr-python's own write path: chunk 0 becomes all fill value
                chunk = [c for c in (path / "data" / "obs" / "c").rglob("*") if c.is_file()]
                assert chunk, f"store {i}: zarr-python deleted the all-zero chunk of data/obs"
                assert verify_store(path) == [], f"store {i}"
            np.testing.assert_array_equal(zarr.open_group(str(path), mode="r")["data/obs"][:],
                                          np.zeros((8, 3), np.float32))
    finally:
        stop.set()
        toggler.join()
