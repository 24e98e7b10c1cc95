"""Deleting a store from object storage (``replaybuf delete URL``): object stores have no directory
to remove, so a store is deleted object by object — under the writer's lease, so a live writer is
never deleted from under, and in an order that a cut delete cannot turn into a store with missing
data: the root's ``zarr.json`` first (the prefix is no store from then on), then the other metadata,
then the chunks and shards, the lease last."""

from __future__ import annotations

from .lease import LEASE_NAME, acquire_lease
from .members import is_metadata_key, list_keys
from .object_store import describe_failure, open_object_store
from .zarr_compat import store_get, sync


def delete_object_store(url: str, storage_options: dict | None = None) -> int:
    """Delete every object of the zarr store at ``url``; returns how many were deleted.

    Raises:
        FileNotFoundError: no zarr store there (no root ``zarr.json``); nothing is deleted.
        StoreLockedError: a writer holds the store's lease (see :mod:`replaybuf_zarr.lease`; a dead
            writer's lease lapses by itself); nothing is deleted.
        OSError: the object store cannot be reached or read (named).
    """
    store = open_object_store(url, read_only=False, storage_options=storage_options)
    try:
        found = store_get(store, "zarr.json") is not None
    except Exception as exc:  # noqa: BLE001 - endpoint, credentials, bucket: named with the URL
        raise describe_failure(url, store, exc) from exc
    if not found:
        raise FileNotFoundError(f"{url}: no zarr store there (no zarr.json); nothing deleted")
    lease = acquire_lease(store)  # StoreLockedError while another writer holds it
    try:
        keys = [k for k in list_keys(store, "") if k != LEASE_NAME]
        order = sorted(keys, key=lambda k: (k != "zarr.json", not is_metadata_key(k), k))
        for key in order:
            sync(store.delete(key))
    finally:
        lease.stale_writer_possible = False  # nothing is left to fence
        lease.release()  # deletes the lease object: nothing of the store is left
    return len(order)
