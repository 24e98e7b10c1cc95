"""Arrays that store every chunk, even one equal to the fill value.

zarr 3 skips writing a chunk whose values all equal the fill value (``write_empty_chunks`` off by
default), so a missing chunk object would be ambiguous; with every chunk stored, ``verify`` can tell a
deleted chunk from one never written.  The setting is given per array (its runtime config), never
through ``zarr.config.set``: that config is process-wide, and one thread leaving a ``config.set`` block
resets it under another thread's open (the likely cause of an all-zero chunk a threaded trial with two
writers in one process once lost).
"""

from __future__ import annotations

import zarr

__all__ = ["storing_empty_chunks"]


def storing_empty_chunks(arr: zarr.Array) -> zarr.Array:
    """``arr`` (same metadata, same store path, same memory order) with ``write_empty_chunks`` on.

    Uses ``Array.with_config`` where zarr has it (3.2+), else builds the array from its public
    ``metadata`` and ``store_path`` (``zarr.AsyncArray(metadata, store_path, config=...)``, zarr 3.1).
    No I/O."""
    config = {"order": arr.order, "write_empty_chunks": True}
    if hasattr(arr, "with_config"):
        return arr.with_config(config)
    return zarr.Array(zarr.AsyncArray(arr.metadata, arr.store_path, config=config))
