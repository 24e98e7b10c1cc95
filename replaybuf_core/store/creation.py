"""Schema-driven creation: a new store holding the arrays a :class:`~replaybuf_core.layout.schema.DatasetSchema`
declares, filled with episodes through the buffered writer (the seed's ``create_zarr_replay_buffer``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from replaybuf_core import registry
from replaybuf_core.errors import CapabilityError
from replaybuf_core.layout.schema import DatasetSchema, as_dataset_schema
from replaybuf_core.layout.sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD

from .buffer import ReplayBuffer
from .replace import build_beside

logger = logging.getLogger(__name__)
LOG_EVERY = 50


def create_replay_buffer(
    schema: Any,
    episodes: Iterable[Mapping[str, Any]],
    total_episodes: int | None = None,
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
    image_codec: Any = None,
    numeric_compressor: Any = "default",
    progress: bool = True,
    overwrite: bool = False,
    *,
    backend: str = "zarr",
    frames: Any = None,
) -> ReplayBuffer:
    """Write every episode of ``episodes`` into a new store at ``schema.zarr_path``.

    ``schema`` is a :class:`~replaybuf_core.layout.schema.DatasetSchema` or a seed-style schema object
    (``zarr_path`` + ``get_zarr_array_specs()``).  The backend (default zarr) creates the arrays the
    schema declares: camera frames (uint8 ``(T, H, W, C)``, C in 1/3/4) with ``image_codec`` (one codec
    object for every camera) or the codec ``frames`` names (``"exact"`` — the default, lossless JPEG XL on
    zarr —, ``"fast"``, ``"jpeg:90"``..., or ``{key: choice}``; :mod:`replaybuf_core.layout.frame_choice`) in chunks of one frame and shards of ``image_frames_per_shard`` frames
    (None: unsharded), numbers with ``numeric_compressor`` (a preset name or codec) where the spec asks
    for one.  Every spec is checked before the path is touched.  A new store is written in place (a
    killed run keeps its committed episodes); an existing store is replaced only with
    ``overwrite=True``, never while another process holds its writer lock, by building the new one
    beside it and swapping it in at the end (a failure leaves the old store as it was).  Each episode
    is validated against the schema before it is staged (ValueError naming the episode index and key;
    nothing of that episode is written) and appended through :meth:`ReplayBuffer.writer`, so each
    chunk/shard is written once.  A tqdm progress bar runs when ``total_episodes`` is known, and a log
    line every 50 episodes.  Zero episodes give a valid empty buffer.  Returns the buffer (writable).

    Raises:
        FileExistsError: ``schema.zarr_path`` exists and ``overwrite`` is False (or it is not a store).
        StoreLockedError: another process is writing to it.
        ValueError / TypeError: a bad schema, spec or episode (see above), bad ``image_frames_per_shard``.
        CapabilityError: the backend cannot create arrays from a schema (``create_schema_arrays``).
    """
    schema = as_dataset_schema(schema)
    entry = registry.get_backend(backend)
    options = dict(image_codec=image_codec, numeric_compressor=numeric_compressor,
                   image_frames_per_shard=image_frames_per_shard)
    if frames is not None:
        options["frames"] = frames
    check = getattr(entry, "check_schema", None)
    if check is None:
        raise CapabilityError(f"backend {backend!r} cannot create a store from a schema (no check_schema / "
                              "create_schema_arrays); use ReplayBuffer.create_empty and add_episode")
    check(schema, **options)  # every spec checked before the path is touched
    path = schema.zarr_path
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    if not path.exists():  # a new store is written in place: a killed run keeps its committed episodes
        rb = _write_store(entry, path, schema, episodes, total_episodes, options, progress)
    else:  # replacing: built beside under the old store's lock (a non-store is refused), swapped in at the end
        with build_beside(path) as beside:
            _write_store(entry, beside.path, schema, episodes, total_episodes, options, progress).close()
        rb = ReplayBuffer(os.fspath(path), backend=backend)
    logger.info("%s: %d episodes, %d steps", path, rb.n_episodes, rb.n_steps)
    return rb


def _write_store(entry: Any, path: Path, schema: DatasetSchema, episodes: Iterable[Mapping[str, Any]],
                 total_episodes: int | None, options: dict, progress: bool) -> ReplayBuffer:
    """Create the store at the free ``path`` and stream ``episodes`` into it; returns it (writable)."""
    store = entry.create(os.fspath(path), if_exists="raise")
    store.create_schema_arrays(schema, **options)
    ReplayBuffer._ensure_episode_ends(store)
    rb = ReplayBuffer(store)
    bar = None
    if progress and total_episodes is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_episodes, unit="episode", desc=f"writing {schema.zarr_path.name}")
    try:
        with rb.writer() as writer:
            for i, episode in enumerate(episodes):
                writer.add_episode(schema.validate_episode(i, episode))
                if bar is not None:
                    bar.update(1)
                if (i + 1) % LOG_EVERY == 0:
                    logger.info("%s: %d episodes staged", schema.zarr_path, i + 1)
    except BaseException:
        rb.close()
        raise
    finally:
        if bar is not None:
            bar.close()
    return rb
