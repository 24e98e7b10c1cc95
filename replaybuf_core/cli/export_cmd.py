"""``replaybuf export FORMAT STORE DST``: a store's episodes written in another library's layout
(:mod:`replaybuf_core.exporting`); formats add their own options
(:meth:`~replaybuf_core.export_format.ExportFormat.add_arguments`)."""

from __future__ import annotations

from replaybuf_core import registry

from .import_cmd import _Recording


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    formats = registry.list_export_formats()
    p = sub.add_parser(
        "export", help="export a store as another library's dataset (LeRobot v3, diffusion-policy zarr, robomimic HDF5)",
        description="Write the episodes of STORE at DST in FORMAT's layout, built beside DST, read back "
                    "through an independent reader and compared with the store before it is moved into "
                    f"place.  Exit 0 when verified, 2 for bad input.  Formats: {', '.join(formats) or 'none'}.")
    p.add_argument("format", metavar="FORMAT", choices=sorted(formats) or None, help="the export format")
    p.add_argument("store", metavar="STORE")
    p.add_argument("dst", metavar="DST")
    p.add_argument("--episodes", default=None, metavar="SEL",
                   help="store episodes to export, e.g. 0:10 or 0:10,15 (Python indices and slices; default all)")
    p.add_argument("--keys", default=None, metavar="K1,K2", help="the data keys to export (default all)")
    p.add_argument("--skip-key", action="append", default=[], metavar="KEY", help="leave this key out (repeatable)")
    p.add_argument("--rename", action="append", default=[], metavar="KEY=NAME",
                   help="export KEY as NAME (repeatable, or comma-separated: img=obs.image,action=actions)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing DST (only a dataset of FORMAT; built beside, swapped at the end)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    owners: dict[str, tuple[list[str], str]] = {}
    flags: dict[str, str] = {}
    for name, info in formats.items():
        group = _Recording(p.add_argument_group(f"{name} options"), flags)
        for dest in info.entrypoint.add_arguments(group):
            names = owners.get(dest, ([], ""))[0]
            owners[dest] = (names + [name], flags.get(dest, "--" + dest.replace("_", "-")))
    p.set_defaults(func=run, export_options=owners)


def run(args) -> int:
    """Run the export; returns 0 when written and verified.  Errors (FileExistsError, KeyError,
    ValueError naming the key / episode / row) are shown by the CLI with exit 2."""
    from replaybuf_core.exporting import export_dataset

    options = {}
    for dest, (owner, flag) in args.export_options.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if args.format not in owner:
            raise ValueError(f"{flag} is an option of the {' and '.join(owner)} export, not of {args.format}")
        options[dest] = value
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    report = export_dataset(args.store, args.dst, args.format, episodes=args.episodes, keys=keys,
                            skip_keys=args.skip_key, rename=args.rename or None, overwrite=args.overwrite,
                            progress=not args.no_progress, **options)
    print(report.summary())
    return 0
