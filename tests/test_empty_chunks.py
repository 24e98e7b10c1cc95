"""Every chunk of a zarr store is written, even one equal to the fill value, whatever other threads of
the process do with zarr's process-wide config.  The backend turned ``write_empty_chunks`` on for its
opens through that config, and one thread leaving its ``zarr.config.set`` block turned it off again
under another thread's open: an all-zero chunk rewritten through zarr-python (the path every
object-store write takes) was then deleted, as zarr does with the setting off — the likely cause of a
threaded SIGSTOP trial on s3:// (two writers in one process) that once ended with ``verify`` saying
chunk 0 of ``data/obs`` was missing."""

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


def test_a_diffusion_policy_export_writes_its_all_zero_chunks(tmp_path, capsys):
    """The export (zarr v2 through zarr-python) left out all-zero chunks, so ``replaybuf verify`` of
    the export failed with "chunk ... is missing" while the export said OK (break-it trial)."""
    from replaybuf_core.cli import main

    src, dst = tmp_path / "src.zarr", tmp_path / "dp.zarr"
    ones, zeros = np.ones((100, 64, 64, 3), np.float32), np.zeros((200, 64, 64, 3), np.float32)
    with ReplayBuffer.create_empty("zarr", str(src)) as rb:
        rb.add_episode({"obs": ones})
        rb.add_episode({"obs": zeros})
    assert main(["export", "diffusion-policy", str(src), str(dst), "--no-progress"]) == 0
    assert verify_store(dst) == []
    g = zarr.open_group(str(dst), mode="r")
    np.testing.assert_array_equal(g["data/obs"][:], np.concatenate([ones, zeros]))
    chunk_rows = g["data/obs"].chunks[0]
    files = [f for f in (dst / "data" / "obs").iterdir() if not f.name.startswith(".")]
    assert len(files) == -(-300 // chunk_rows)  # every chunk of the grid is a file (v2 keys: "i.0.0.0")
