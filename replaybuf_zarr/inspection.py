"""Backend-specific facts for ``replaybuf info`` / ``verify``: bytes stored per array and missing
stored objects (the zarr side of the optional protocol methods ``stored_bytes`` / ``check_chunks``)."""

from __future__ import annotations

import itertools
import math

import zarr

from .layout import object_keys
from .zarr_compat import sync

#: ``check_chunks`` lists at most this many missing objects per array, then a count of the rest.
MAX_LISTED = 20


async def _list(store, prefix: str) -> list[str]:
    return [k async for k in store.list_prefix(prefix)]


def stored_bytes(arr: zarr.Array) -> int | None:
    """Bytes the store holds for ``arr`` (metadata + every chunk/shard object), or None when the store
    cannot tell."""
    try:
        return int(sync(arr.store.getsize_prefix(arr.path)))
    except (NotImplementedError, AttributeError, TypeError):
        return None


def object_shape(arr: zarr.Array) -> tuple[int, ...]:
    """Shape of one stored object: the shard shape of a sharded v3 array, else the chunk shape."""
    shards = getattr(arr, "shards", None)
    return tuple(shards) if shards else tuple(arr.chunks)


def missing_objects(arr: zarr.Array, label: str, rows: int | None = None) -> list[str]:
    """Problems: stored objects (chunk or shard files) that the array's shape needs but the store
    lacks, each naming ``label`` (e.g. ``"data/img"``) and its row range.  Such rows read as the fill
    value; zarr itself omits chunks equal to the fill value unless ``write_empty_chunks`` is on (the
    importer turns it on), so on other writers' stores a missing all-fill chunk may be benign — the
    message says so.  With ``rows``, objects starting at or past row ``rows`` are left out (rows a
    killed writer left past ``episode_ends[-1]``: uncommitted, so nothing is lost with them)."""
    shape = tuple(arr.shape)
    if len(shape) == 0 or math.prod(shape) == 0:
        return []
    obj = object_shape(arr)
    grid = [range(-(-s // c)) for s, c in zip(shape, obj)]
    keys = object_keys(arr)
    if keys is None:
        return [f"{label}: its chunk key encoding is not one replaybuf knows; stored objects not checked"]
    present = set(sync(_list(arr.store, arr.path + "/")))
    missing = []
    for coords in itertools.product(*grid):
        if rows is not None and coords[0] * obj[0] >= rows:
            continue
        if keys(coords) not in present:
            missing.append(coords)
    problems = []
    kind = "shard" if getattr(arr, "shards", None) else "chunk"
    for coords in missing[:MAX_LISTED]:
        a = coords[0] * obj[0]
        b = min(shape[0], a + obj[0])
        where = f" (grid position {coords})" if len(grid) > 1 and any(len(g) > 1 for g in grid[1:]) else ""
        problems.append(f"{label}: {kind} {coords[0]} (rows [{a}, {b})){where} is missing from the store; "
                        f"those rows read as the fill value {arr.fill_value!r} (benign only if the data "
                        f"there really is all {arr.fill_value!r}: zarr skips such chunks by default)")
    if len(missing) > MAX_LISTED:
        problems.append(f"{label}: ... and {len(missing) - MAX_LISTED} more missing {kind}s")
    return problems
