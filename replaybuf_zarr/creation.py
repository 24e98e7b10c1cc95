"""Schema-driven creation of zarr replay buffers: WebP frames (sharded), Blosc numbers."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.compressors import resolve_compressor
from replaybuf_core.store.replace import build_beside
from replaybuf_core.layout.schema import DatasetSchema, as_dataset_schema, is_uint8_image_spec

from .entrypoint import ZarrEntrypoint
from .codec_convert import to_zarr_codecs
from .codecs import WebPCodec
from .codecs.webp import LOSSLESS_LEVEL
from .codecs.webp import check_chunk_shape as check_webp_chunk_shape
from .sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, get_image_shard_shape, validate_image_frames_per_shard

logger = logging.getLogger(__name__)
LOG_EVERY = 50

#: The image codec of schema-driven creation: lossless WebP (exact; ``level`` is the effort).
DEFAULT_IMAGE_CODEC = WebPCodec(level=LOSSLESS_LEVEL, lossless=True)


def _array_plan(key: str, spec: dict[str, Any], image_codec: Any, compressor: Any,
                frames_per_shard: int | None) -> dict[str, Any]:
    """The ``create_array`` arguments of one normalised spec (nothing created).  Raises ValueError /
    TypeError naming the key when the image codec cannot store the frames."""
    if is_uint8_image_spec(spec):
        chunks = (1,) + tuple(spec["shape"][1:])
        if isinstance(image_codec, WebPCodec):
            try:
                check_webp_chunk_shape(chunks)
            except ValueError as exc:
                raise ValueError(f"array spec {key!r}: {exc}") from None
        return dict(shape=spec["shape"], dtype="uint8", chunks=chunks, serializer=image_codec,
                    compressors=None, fill_value=0,
                    shards=get_image_shard_shape(chunks, frames_per_shard) if frames_per_shard else None)
    _, comps = to_zarr_codecs(compressor if spec["needs_compressor"] else None)
    if spec["dtype"] == object:  # text: zarr's variable-length UTF-8 strings
        return dict(shape=spec["shape"], dtype=str, chunks=spec["chunks"], fill_value="", compressors=comps)
    return dict(shape=spec["shape"], dtype=spec["dtype"], chunks=spec["chunks"], compressors=comps)


def create_zarr_arrays(
    data_group: zarr.Group,
    schema: Any,
    image_codec: Any = None,
    numeric_compressor: Any = "default",
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
) -> dict[str, zarr.Array]:
    """Create one empty array per schema spec in ``data_group``.

    ``schema`` is a :class:`~replaybuf_core.layout.schema.DatasetSchema` or any seed-style schema object
    (``zarr_path`` + ``get_zarr_array_specs()``; see :func:`~replaybuf_core.layout.schema.as_dataset_schema`).
    Camera frames (:func:`~replaybuf_core.layout.schema.is_uint8_image_spec`: uint8 ``(0, H, W, C)``, C in
    1/3/4) get ``image_codec`` as serializer — default :data:`DEFAULT_IMAGE_CODEC`, **lossless**
    WebP, so what is written reads back exactly — chunks of one frame ``(1, H, W, C)`` and shards of
    ``image_frames_per_shard`` frames (None: no sharding).  Every other spec (numbers, channels-first
    frame stacks, text) gets the spec's chunks and ``numeric_compressor`` (preset name or codec), or no
    compressor when ``needs_compressor`` is False.

    Raises:
        TypeError / ValueError: a bad schema or spec, bad ``image_frames_per_shard`` (see
            :func:`~replaybuf_zarr.sharding.validate_image_frames_per_shard`), an unknown preset.
        FileExistsError: an array of that name already exists in ``data_group``.
    Every argument and spec is checked before the first array is created; should creating one fail
    (I/O), the arrays created by this call are removed again.
    """
    schema = as_dataset_schema(schema)
    n = validate_image_frames_per_shard(image_frames_per_shard)
    image_codec = DEFAULT_IMAGE_CODEC if image_codec is None else image_codec
    compressor = resolve_compressor(numeric_compressor)
    specs = schema.get_zarr_array_specs()
    taken = [k for k in specs if k in data_group]
    if taken:
        raise FileExistsError(f"arrays {taken} already exist in {data_group}")
    plans = {key: _array_plan(key, spec, image_codec, compressor, n) for key, spec in specs.items()}
    created: dict[str, zarr.Array] = {}
    try:
        for key, plan in plans.items():
            created[key] = data_group.create_array(key, **plan)
    except BaseException:
        for key in created:
            try:
                del data_group[key]
            except Exception:  # noqa: BLE001 -- the original error matters more
                logger.warning("could not remove the half-created array %s", key)
        raise
    return created


def create_zarr_replay_buffer(
    schema: Any,
    episodes: Iterable[Mapping[str, Any]],
    total_episodes: int | None = None,
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
    image_codec: Any = None,
    numeric_compressor: Any = "default",
    progress: bool = True,
    overwrite: bool = False,
) -> ReplayBuffer:
    """Write every episode of ``episodes`` into a new zarr store at ``schema.zarr_path``.

    ``schema`` is a :class:`~replaybuf_core.layout.schema.DatasetSchema` or a seed-style schema object.
    Every spec is checked before the path is touched.  A new store is written in place (a killed run
    keeps its committed episodes); an existing store is replaced only with ``overwrite=True``, never
    while another process holds its writer lock, by building the new one beside it and swapping it
    in at the end (a failure leaves the old store as it was).  Creates ``data``/``meta`` and the
    arrays (:func:`create_zarr_arrays`), validates each episode against the schema before staging it
    (ValueError naming the episode index and key; nothing of that episode is written) and appends
    through :meth:`ReplayBuffer.writer`, so each chunk/shard is written once.  A tqdm progress bar
    runs when ``total_episodes`` is known, and a log line every 50 episodes.  Zero episodes give a valid
    empty buffer.  Returns the buffer (writable).

    Raises:
        FileExistsError: ``schema.zarr_path`` exists and ``overwrite`` is False (or it is not a zarr
            store).  StoreLockedError: another process is writing to it.
        ValueError / TypeError: a bad episode (see above), bad ``image_frames_per_shard``.
    """
    schema = as_dataset_schema(schema)
    n = validate_image_frames_per_shard(image_frames_per_shard)
    compressor = resolve_compressor(numeric_compressor)
    codec = DEFAULT_IMAGE_CODEC if image_codec is None else image_codec
    for key, spec in schema.get_zarr_array_specs().items():  # every spec checked before the path is touched
        _array_plan(key, spec, codec, compressor, n)
    if schema.zarr_path.exists() and not overwrite:
        raise FileExistsError(f"{schema.zarr_path} already exists; pass overwrite=True (CLI: --overwrite) "
                              "to replace it")
    path = schema.zarr_path
    if path.exists() and not ((path / "zarr.json").exists() or (path / ".zgroup").exists()):
        raise FileExistsError(f"{path} exists and is not a zarr store; refusing to replace it")
    if not path.exists():  # a new store is written in place: a killed run keeps its committed episodes
        rb = _write_store(path, schema, episodes, total_episodes, image_codec, numeric_compressor,
                          image_frames_per_shard, progress)
    else:  # replacing: built beside under the old store's lock, swapped in at the end
        with build_beside(path) as beside:
            _write_store(beside.path, schema, episodes, total_episodes, image_codec, numeric_compressor,
                         image_frames_per_shard, progress).close()
        rb = ReplayBuffer(os.fspath(path))
    logger.info("%s: %d episodes, %d steps", path, rb.n_episodes, rb.n_steps)
    return rb


def _write_store(path: Path, schema: DatasetSchema, episodes: Iterable[Mapping[str, Any]],
                 total_episodes: int | None, image_codec: Any, numeric_compressor: Any,
                 image_frames_per_shard: int | None, progress: bool) -> ReplayBuffer:
    """Create the store at the free ``path`` and stream ``episodes`` into it; returns it (writable)."""
    backend = ZarrEntrypoint().create(os.fspath(path), if_exists="raise")
    create_zarr_arrays(backend.native_group("data"), schema, image_codec=image_codec,
                       numeric_compressor=numeric_compressor, image_frames_per_shard=image_frames_per_shard)
    ReplayBuffer._ensure_episode_ends(backend)
    rb = ReplayBuffer(backend)
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
