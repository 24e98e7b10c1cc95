"""Writing a synthetic task data set (:class:`~replaybuf_core.synthetic.schema.SyntheticSchema`) into a new
store, with its trajectory plot beside it (what ``replaybuf synth`` runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replaybuf_core.layout.schema import DatasetSchema
from replaybuf_core.layout.sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, validate_image_frames_per_shard
from replaybuf_core.store.buffer import ReplayBuffer
from replaybuf_core.store.creation import create_replay_buffer

from .schema import SyntheticSchema


def create_replay_buffer_from_synthetic(
    schema: SyntheticSchema,
    image_frames_per_shard: int | None = DEFAULT_IMAGE_FRAMES_PER_SHARD,
    progress: bool = True,
    overwrite: bool = False,
    *,
    backend: str = "zarr",
    frames: Any = None,
) -> tuple[ReplayBuffer, Path]:
    """Generate ``schema``'s episodes into a new store at ``schema.zarr_path`` (default backend zarr)
    and save the trajectory plot ``<stem>_trajectories.png`` beside it.

    Frames are in the codec ``frames`` names (:mod:`replaybuf_core.layout.frame_choice`; default
    ``exact``, zarr: lossless JPEG XL; one frame a chunk, ``image_frames_per_shard`` frames a shard), numbers Blosc lz4 (``needs_compressor`` per the
    schema).  Returns ``(buffer, png_path)``; the buffer is writable.

    Raises:
        TypeError / ValueError: bad ``image_frames_per_shard`` or ``frames`` — before anything is written.
        FileExistsError: the store exists and ``overwrite`` is False.
    """
    validate_image_frames_per_shard(image_frames_per_shard)  # before the generator starts
    recorder = schema.trajectory_recorder()  # create_replay_buffer refuses an existing path before it reads an episode

    def episodes():
        for ep in schema.episodes():
            recorder.add(ep)
            yield ep

    dataset = DatasetSchema(schema.zarr_path, schema.array_specs())
    rb = create_replay_buffer(dataset, episodes(), total_episodes=schema.num_episodes,
                              image_frames_per_shard=image_frames_per_shard, progress=progress,
                              overwrite=overwrite, backend=backend, frames=frames)
    png = recorder.save(schema.trajectory_plot_path())
    return rb, Path(png)
