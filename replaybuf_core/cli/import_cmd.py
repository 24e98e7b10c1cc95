"""``replaybuf import [FORMAT] SRC DST``: any installed format into a new store, on the one import
pipeline (:mod:`replaybuf_core.importing.pipeline`).  FORMAT is guessed from SRC when omitted;
formats add their own options (:meth:`~replaybuf_core.source.FormatEntrypoint.add_arguments`)."""

from __future__ import annotations

import argparse
import sys

from replaybuf_core import registry
from replaybuf_core.cluster.clients import add_cluster_arguments, client_for
from replaybuf_core.layout.frame_choice import FRAMES_HELP


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    formats = registry.list_formats()
    p = sub.add_parser(
        "import", help="import a dataset of another format (LeRobot, diffusion-policy, ...) into a new store",
        description="Stream a dataset of another format into a new store: uint8 camera frames (and float "
                    "frames holding only integers 0..255) in the --frames codec (default exact: lossless WebP up to 96x96, JPEG XL above), depth and numbers as Blosc; then "
                    "check every array against the source.  The store is built beside DST and moved into "
                    "place once verified.  Exit 0 when verified, 1 when a check failed, 2 for bad input.  "
                    f"Formats: {', '.join(formats) or 'none'} (`replaybuf formats`).",
        usage="replaybuf import [-h] [options] [FORMAT] SRC DST",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="[FORMAT] SRC DST",
                   help="the format (guessed from SRC when left out), the source and the destination")
    p.add_argument("--backend", default="zarr", help="destination backend (default zarr; `replaybuf backends`)")
    p.add_argument("--episodes", default=None, metavar="SEL",
                   help="source episodes to import, e.g. 0:10 or 0:10,15,20: (Python indices and slices into "
                        "the source's episode list in its order -- LeRobot's episode_index order, robomimic's "
                        "demo numbers sorted; default all)")
    p.add_argument("--skip-key", action="append", default=[], metavar="KEY", help="leave this key out (repeatable)")
    p.add_argument("--keep-dtype", action="store_true",
                   help="keep non-uint8 frames in their source dtype (Blosc) instead of converting")
    p.add_argument("--frames", default=None, metavar="CHOICE", help=FRAMES_HELP)
    p.add_argument("--lossy-quality", type=int, default=None, metavar="Q",
                   help="the older spelling of --frames webp:Q (lossy WebP at quality Q, 0..100)")
    p.add_argument("--frames-per-shard", type=int, default=256, metavar="N",
                   help="image frames per shard (default 256, fewer for large frames); 0 disables sharding")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at DST")
    p.add_argument("--drop-empty-episodes", action="store_true",
                   help="leave out zero-length source episodes and record their indices in the store's "
                        "attributes; without it such a source is refused")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--restart", action="store_true",
                   help="with --workers/--scheduler: start over instead of continuing what a stopped (killed, Ctrl-C, SIGTERM) run of the same "
                        "import left beside DST (rerunning the same command continues it by default)")
    add_cluster_arguments(p, "import")
    owners: dict[str, tuple[list[str], str]] = {}  # dest -> (formats taking it, flag)
    flags: dict[str, str] = {}
    for name, info in formats.items():
        group = _Recording(p.add_argument_group(f"{name} options"), flags)
        for dest in info.entrypoint.add_arguments(group):
            names = owners.get(dest, ([], ""))[0]
            owners[dest] = (names + [name], flags.get(dest, "--" + dest.replace("_", "-")))
    p.set_defaults(func=run, format_options=owners)


class _Recording:
    """An argparse group that remembers each option's first flag by its ``dest`` (for messages);
    an option several formats take (``--missing-keys``) is added once, by the first."""

    def __init__(self, group, flags: dict[str, str]):
        self._group = group
        self.flags = flags

    def add_argument(self, *args, **kwargs):
        dest = kwargs.get("dest")
        if dest is not None and dest in self.flags:
            return None  # added by an earlier format
        action = self._group.add_argument(*args, **kwargs)
        self.flags[action.dest] = action.option_strings[0] if action.option_strings else action.dest
        return action


def run(args) -> int:
    """Run the import described by ``args``; returns 0 when verified, 1 when a check failed."""
    from replaybuf_core.importing.arguments import open_format
    from replaybuf_core.importing.pipeline import check_destination, check_settings, import_source

    if len(args.paths) not in (2, 3):
        raise ValueError(f"expected [FORMAT] SRC DST, got {len(args.paths)} path argument(s): {args.paths}")
    check_settings(args.lossy_quality, None if args.frames_per_shard == 0 else args.frames_per_shard, args.frames)
    fmt, src, dst = args.paths if len(args.paths) == 3 else (None, *args.paths)
    entry = registry.get_format(fmt) if fmt is not None else registry.guess_format(src)
    check_destination(src, dst, args.backend, args.overwrite)
    options = {}
    for dest, (owner, flag) in args.format_options.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if entry.name not in owner:
            raise ValueError(f"{flag} is an option of the {' and '.join(owner)} format{'s' if len(owner) > 1 else ''}, "
                             f"not of {entry.name}")
        options[dest] = value
    kwargs = dict(backend=args.backend, episodes=args.episodes, skip_keys=args.skip_key, keep_dtype=args.keep_dtype,
                  lossy_quality=args.lossy_quality, frames=args.frames,
                  image_frames_per_shard=None if args.frames_per_shard == 0 else args.frames_per_shard,
                  progress=not args.no_progress, overwrite=args.overwrite,
                  drop_empty_episodes=args.drop_empty_episodes)
    with client_for(args) as client:
        if client is not None:
            from replaybuf_core.importing import import_dataset

            report = import_dataset(src, dst, entry.name, format_options=options, client=client,
                                    resume=not args.restart, **kwargs)
        else:
            source = open_format(entry, src, options, not args.no_progress)
            try:
                report = import_source(source, dst, **kwargs)
            finally:
                source.close()
    print(report.summary())
    sys.stdout.flush()
    return 0 if report.ok else 1
