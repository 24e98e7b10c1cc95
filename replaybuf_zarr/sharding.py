"""Shard shapes for WebP image arrays: :mod:`replaybuf_core.layout.sharding`, re-exported here where the
zarr backend's users have always found them."""

from replaybuf_core.layout.sharding import (
    DEFAULT_IMAGE_FRAMES_PER_SHARD,
    get_image_shard_shape,
    validate_image_frames_per_shard,
)

__all__ = ["DEFAULT_IMAGE_FRAMES_PER_SHARD", "get_image_shard_shape", "validate_image_frames_per_shard"]
