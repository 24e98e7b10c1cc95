"""replaybuf's Zarr v3 backend: zarr groups as replay-buffer stores, the frame codecs (JPEG XL, JPEG, WebP), the fast chunk
reader and writer, object storage, and the storage half of the seed's schema-driven creation
(``create_zarr_arrays``, the image-shard helpers).

The seed also documents three features under this package's name: ``create_zarr_replay_buffer``,
``create_replay_buffer_from_synthetic`` and ``rechunk_recompress_array``.  They live above the
backends (:mod:`replaybuf_core.store.creation`, :mod:`replaybuf_core.synthetic.store`,
:mod:`replaybuf_core.store.rechunk`) and are re-exported here on first use, so that importing the
backend never imports the store (docs/architecture.md)."""

from replaybuf_core.layout.schema import is_uint8_image_spec

from .backend import ZarrBackend
from .creation import DEFAULT_IMAGE_CODEC, create_zarr_arrays
from .entrypoint import ZarrEntrypoint
from .sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, get_image_shard_shape, validate_image_frames_per_shard

__all__ = [
    "DEFAULT_IMAGE_CODEC",
    "DEFAULT_IMAGE_FRAMES_PER_SHARD",
    "ZarrBackend",
    "ZarrEntrypoint",
    "create_replay_buffer_from_synthetic",
    "create_zarr_arrays",
    "create_zarr_replay_buffer",
    "get_image_shard_shape",
    "is_uint8_image_spec",
    "rechunk_recompress_array",
    "validate_image_frames_per_shard",
]

def __getattr__(name: str):
    # The one place a backend imports upward, named in pyproject.toml's contract (ignore_imports).
    if name == "create_zarr_replay_buffer":
        from replaybuf_core.store.creation import create_replay_buffer

        return create_replay_buffer
    if name == "create_replay_buffer_from_synthetic":
        from replaybuf_core.synthetic.store import create_replay_buffer_from_synthetic

        return create_replay_buffer_from_synthetic
    if name == "rechunk_recompress_array":
        from replaybuf_core.store.rechunk import rechunk_recompress_array

        return rechunk_recompress_array
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
