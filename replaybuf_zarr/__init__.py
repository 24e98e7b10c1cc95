"""replaybuf's Zarr v3 backend: zarr groups as replay-buffer stores, codec translation, rechunking,
and the seed's schema-driven creation functions (``create_zarr_arrays``, ``create_zarr_replay_buffer``,
``create_replay_buffer_from_synthetic``, the image-shard helpers)."""

from replaybuf_core.layout.schema import is_uint8_image_spec

from .backend import ZarrBackend
from .entrypoint import ZarrEntrypoint
from .creation import DEFAULT_IMAGE_CODEC, create_zarr_arrays, create_zarr_replay_buffer
from .rechunk import rechunk_recompress_array
from .sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, get_image_shard_shape, validate_image_frames_per_shard
from .synthetic import create_replay_buffer_from_synthetic

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
