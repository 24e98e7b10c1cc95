"""``replaybuf merge SRC... DST``: the episodes of every SRC, in order, in a new store DST."""

from __future__ import annotations


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("merge", help="merge stores into a new one",
                       description="Write the episodes of every SRC, in order, to a new zarr store DST (built "
                                   "beside it and swapped in once complete).  The sources must agree on data "
                                   "keys, dtypes and step shapes; DST takes SRC 1's chunks and codecs.")
    p.add_argument("paths", metavar="PATH", nargs="+", help="SRC... DST")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 done, 2 refused)."""
    from replaybuf_core.store.buffer import ReplayBuffer

    if len(args.paths) < 2:
        raise ValueError("give at least one SRC and the DST")
    *sources, dst = args.paths
    report = ReplayBuffer.merge_stores(sources, dst, overwrite=args.overwrite, progress=not args.no_progress)
    print(f"{dst}: {report['n_episodes']} episodes / {report['n_steps']} steps from {len(sources)} store(s)")
    for note in report.get("notes", []):
        print(f"  note: {note}")
    if report["meta_left_out"]:
        print(f"  per-episode meta arrays not in every source, left out: {report['meta_left_out']}")
    return 0
