"""``replaybuf import FORMAT ...``: one sub-sub-command per source format (today: ``diffusion-policy``).

To add a format, write ``register_<format>(import_sub)`` taking the ``import`` command's sub-parser
action and call it from :func:`register_import`.
"""

from __future__ import annotations

import sys


def register_import(sub) -> None:
    """Add ``import`` (with its format sub-commands) to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("import", help="import a replay buffer of another format into a zarr store",
                       description="Import a replay buffer of another format into a new replaybuf zarr store.")
    formats = p.add_subparsers(dest="format", metavar="FORMAT")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    register_diffusion_policy(formats)


def register_diffusion_policy(formats) -> None:
    """Add ``diffusion-policy`` to the ``import`` command's format sub-parser action ``formats``."""
    p = formats.add_parser(
        "diffusion-policy", help="diffusion_policy zarr v2/v3 replay buffer (directory or .zarr.zip)",
        description="Stream a diffusion_policy replay buffer into a new zarr v3 store: uint8 frames (and "
                    "float frames holding only integers 0..255) as WebP, numbers as Blosc lz4; then check "
                    "every array against the source.  Exit 0 when verified, 1 when a check failed.")
    p.add_argument("src", metavar="SRC", help="source store: zarr v2/v3 directory or .zarr.zip")
    p.add_argument("dst", metavar="DST", help="destination directory (must not exist unless --overwrite)")
    p.add_argument("--keep-dtype", action="store_true",
                   help="keep non-uint8 image arrays in their source dtype (Blosc) instead of converting")
    p.add_argument("--lossy-quality", type=int, default=None, metavar="Q",
                   help="lossy WebP at quality Q (0..100); default lossless")
    p.add_argument("--frames-per-shard", type=int, default=256, metavar="N",
                   help="image frames per shard (default 256); 0 disables sharding")
    p.add_argument("--overwrite", action="store_true", help="replace an existing zarr store at DST")
    p.add_argument("--drop-empty-episodes", action="store_true",
                   help="leave out zero-length source episodes (equal consecutive episode_ends) and record "
                        "their indices in the store's attributes; without it such a source is refused")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_diffusion_policy)


def run_diffusion_policy(args) -> int:
    """Run the import described by ``args``; returns 0 when verified, 1 when a check failed."""
    from .diffusion_policy import import_diffusion_policy

    report = import_diffusion_policy(
        args.src, args.dst, keep_dtype=args.keep_dtype, lossy_quality=args.lossy_quality,
        image_frames_per_shard=None if args.frames_per_shard == 0 else args.frames_per_shard,
        progress=not args.no_progress, overwrite=args.overwrite,
        drop_empty_episodes=args.drop_empty_episodes)
    print(report.summary())
    sys.stdout.flush()
    return 0 if report.ok else 1
