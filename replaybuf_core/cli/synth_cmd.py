"""``replaybuf synth``: generate a synthetic multimodal task data set into a new store (no download)."""

from __future__ import annotations

import os

from replaybuf_core.layout.codec_names import describe_codec
from replaybuf_core.layout.frame_choice import FRAMES_HELP, parse_frames
from replaybuf_core.synthetic.tasks import TASK_NAMES


def _store_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def register(sub) -> None:
    """Add ``synth`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("synth", help="generate a synthetic multimodal task data set (no download needed)",
                       description="Generate a synthetic multimodal imitation-learning data set into a "
                                   "zarr store, plus a PNG of all trajectories beside it.")
    p.add_argument("task", choices=TASK_NAMES, metavar="TASK", help=f"one of {', '.join(TASK_NAMES)}")
    p.add_argument("out", metavar="OUT.zarr", help="output store directory (must not exist unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing zarr store at OUT.zarr")
    p.add_argument("--episodes", type=int, default=1000, help="number of episodes (default 1000)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--image-size", type=int, default=64, help="frame side in pixels (default 64)")
    p.add_argument("--modes", type=int, default=None, help="number of modes K (default: the task's)")
    p.add_argument("--styles", type=int, default=1, help="styles per gap (corridor_navigation)")
    p.add_argument("--length", type=int, default=60, help="steps per episode (default 60)")
    p.add_argument("--noise", type=float, default=0.008, help="position noise std (unit square)")
    p.add_argument("--frames-per-shard", type=int, default=256, help="frames per shard; 0 disables sharding")
    p.add_argument("--frames", default=None, metavar="CHOICE", help=FRAMES_HELP)
    p.set_defaults(func=run)


def run(args) -> int:
    """Generate the data set described by ``args``; returns 0.  Raises ValueError/TypeError for bad
    settings, FileExistsError for an existing output without ``--overwrite``."""
    from replaybuf_core.locations import local_path
    from replaybuf_core.synthetic import SyntheticSchema, create_replay_buffer_from_synthetic

    local_path(args.out, "synth output")  # a local path (and a PNG beside it); ValueError for a URL
    schema = SyntheticSchema(args.out, task_name=args.task, num_episodes=args.episodes, seed=args.seed,
                             image_size=args.image_size, num_modes=args.modes, trajectory_length=args.length,
                             noise_std=args.noise, num_styles=args.styles)
    fps = None if args.frames_per_shard == 0 else args.frames_per_shard
    parse_frames(args.frames)  # a bad choice fails before anything is generated
    rb, png = create_replay_buffer_from_synthetic(schema, image_frames_per_shard=fps, overwrite=args.overwrite,
                                                  frames=args.frames)
    with rb:  # closing records the episodes as the store's first version (``replaybuf log``)
        print(f"wrote {schema.zarr_path}: {rb.n_episodes} episodes, {rb.n_steps} steps, task {args.task}")
        codecs = rb.get_compressors()
        for key in rb.keys():
            arr = rb[key]
            print(f"  {key:<10} {str(tuple(arr.shape)):<22} {str(arr.dtype):<8} {describe_codec(codecs[key])}")
    print(f"bytes on disk: {_store_bytes(schema.zarr_path):,}")
    print(f"trajectory plot: {png}")
    return 0
