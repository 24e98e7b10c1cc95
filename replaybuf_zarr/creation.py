"""Schema-driven creation of zarr arrays: camera frames in a frame codec (sharded), Blosc numbers, zarr strings.

The storage half of the seed's schema-driven creation; filling a new store with episodes is
:func:`replaybuf_core.store.creation.create_replay_buffer` (re-exported here as the seed's
``create_zarr_replay_buffer``), which asks the backend for these arrays through
:meth:`ZarrEntrypoint.check_schema` and :meth:`ZarrBackend.create_schema_arrays`."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import zarr

from replaybuf_core.layout.compressors import resolve_compressor
from replaybuf_core.layout.schema import as_dataset_schema, is_uint8_image_spec

from .codec_convert import to_zarr_codecs
from .codecs import FrameCodec, JpegXLCodec
from replaybuf_core.layout.sharding import frame_chunk_shape, frame_shard_shape

from .sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, validate_image_frames_per_shard

logger = logging.getLogger(__name__)

#: The image codec of schema-driven creation: the ``exact`` tier, lossless JPEG XL at effort 1.
DEFAULT_IMAGE_CODEC = JpegXLCodec()


def _array_plan(key: str, spec: dict[str, Any], image_codec: Any, compressor: Any,
                frames_per_shard: int | None) -> dict[str, Any]:
    """The ``create_array`` arguments of one normalised spec (nothing created).  Raises ValueError /
    TypeError naming the key when the image codec cannot store the frames."""
    if is_uint8_image_spec(spec):
        chunks = frame_chunk_shape(spec["shape"], image_codec)
        if isinstance(image_codec, FrameCodec):
            try:
                image_codec.check_chunk_shape(chunks)
            except ValueError as exc:
                raise ValueError(f"array spec {key!r}: {exc}") from None
        return dict(shape=spec["shape"], dtype="uint8", chunks=chunks, serializer=image_codec,
                    compressors=None, fill_value=0,
                    shards=frame_shard_shape(chunks, frames_per_shard) if frames_per_shard else None)
    _, comps = to_zarr_codecs(compressor if spec["needs_compressor"] else None)
    if spec["dtype"] == object:  # text: zarr's variable-length UTF-8 strings
        return dict(shape=spec["shape"], dtype=str, chunks=spec["chunks"], fill_value="", compressors=comps)
    return dict(shape=spec["shape"], dtype=spec["dtype"], chunks=spec["chunks"], compressors=comps)


def _frame_codecs(specs: dict[str, dict[str, Any]], image_codec: Any, frames: Any) -> dict[str, Any]:
    """key → the serializer of each camera-frame spec: ``image_codec`` for all, or each key's choice
    of ``frames`` (:func:`~replaybuf_core.layout.frame_choice.choose_frames`; default ``exact``)."""
    from replaybuf_core.layout.frame_choice import choose_frames

    from .frame_choice import zarr_frame_codec

    keys = [k for k, spec in specs.items() if is_uint8_image_spec(spec)]
    if image_codec is not None:
        if frames is not None:
            raise ValueError("give image_codec (one codec object) or frames (choices by name), not both")
        return dict.fromkeys(keys, image_codec)
    choices = choose_frames(frames, {k: (specs[k]["shape"], np.uint8) for k in keys})
    return {k: zarr_frame_codec(c) for k, c in choices.items()}


def create_zarr_arrays(
    data_group: zarr.Group,
    schema: Any,
    image_codec: Any = None,
    numeric_compressor: Any = "default",
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
    frames: Any = None,
) -> dict[str, zarr.Array]:
    """Create one empty array per schema spec in ``data_group``.

    ``schema`` is a :class:`~replaybuf_core.layout.schema.DatasetSchema` or any seed-style schema object
    (``zarr_path`` + ``get_zarr_array_specs()``; see :func:`~replaybuf_core.layout.schema.as_dataset_schema`).
    Camera frames (:func:`~replaybuf_core.layout.schema.is_uint8_image_spec`: uint8 ``(0, H, W, C)``, C in
    1/3/4) get ``image_codec`` as serializer, or the codec ``frames`` names for each (a
    :mod:`~replaybuf_core.layout.frame_choice` choice or ``{key: choice}``) — default ``exact``
    (:data:`DEFAULT_IMAGE_CODEC`, **lossless** JPEG XL), so what is written reads back exactly — chunks of one frame ``(1, H, W, C)`` and shards of
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
    compressor = resolve_compressor(numeric_compressor)
    specs = schema.get_zarr_array_specs()
    codecs = _frame_codecs(specs, image_codec, frames)
    taken = [k for k in specs if k in data_group]
    if taken:
        raise FileExistsError(f"arrays {taken} already exist in {data_group}")
    plans = {key: _array_plan(key, spec, codecs.get(key), compressor, n) for key, spec in specs.items()}
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


def check_schema_arrays(
    schema: Any,
    image_codec: Any = None,
    numeric_compressor: Any = "default",
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
    frames: Any = None,
) -> None:
    """Check everything :func:`create_zarr_arrays` would be given, creating nothing: the schema, every
    spec, ``image_frames_per_shard``, the preset and whether ``image_codec`` or the ``frames`` choices
    (default ``exact``) can store each camera's frames.

    Raises:
        TypeError / ValueError: naming the spec or argument at fault.
    """
    schema = as_dataset_schema(schema)
    n = validate_image_frames_per_shard(image_frames_per_shard)
    compressor = resolve_compressor(numeric_compressor)
    specs = schema.get_zarr_array_specs()
    codecs = _frame_codecs(specs, image_codec, frames)
    for key, spec in specs.items():
        _array_plan(key, spec, codecs.get(key), compressor, n)
