"""Write synthetic multimodal task data sets (:mod:`replaybuf_core.synthetic`) as zarr buffers."""

from __future__ import annotations

from pathlib import Path

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.schema import DatasetSchema
from replaybuf_core.synthetic import SyntheticSchema

from .codecs import WebPCodec
from .creation import create_zarr_replay_buffer
from .sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, validate_image_frames_per_shard

#: Synthetic frames are flat colours: lossless WebP is exact, ~3× smaller and faster than level-99 lossy.
SYNTHETIC_IMAGE_CODEC = WebPCodec(level=99, lossless=True)


def create_replay_buffer_from_synthetic(
    schema: SyntheticSchema,
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
    progress: bool = True,
    overwrite: bool = False,
) -> tuple[ReplayBuffer, Path]:
    """Generate ``schema``'s episodes into a zarr store at ``schema.zarr_path`` and save the trajectory
    plot ``<stem>_trajectories.png`` beside it.

    Frames are lossless WebP (one frame a chunk, ``image_frames_per_shard`` frames a shard), numbers
    Blosc lz4 (``needs_compressor`` per the schema).  Returns ``(buffer, png_path)``.

    Raises:
        TypeError / ValueError: bad ``image_frames_per_shard`` — before anything is written.
        FileExistsError: the store exists and ``overwrite`` is False.
    """
    validate_image_frames_per_shard(image_frames_per_shard)
    if schema.zarr_path.exists() and not overwrite:
        raise FileExistsError(f"{schema.zarr_path} already exists; pass overwrite=True (CLI: --overwrite) "
                              "to replace it")
    recorder = schema.trajectory_recorder()

    def episodes():
        for ep in schema.episodes():
            recorder.add(ep)
            yield ep

    dataset = DatasetSchema(schema.zarr_path, schema.array_specs())
    rb = create_zarr_replay_buffer(dataset, episodes(), total_episodes=schema.num_episodes,
                                   image_frames_per_shard=image_frames_per_shard,
                                   image_codec=SYNTHETIC_IMAGE_CODEC, progress=progress, overwrite=overwrite)
    png = recorder.save(schema.trajectory_plot_path())
    return rb, Path(png)
