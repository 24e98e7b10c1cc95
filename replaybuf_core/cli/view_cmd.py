"""``replaybuf view PATH --episode I OUT.png [--key KEY]``: contact sheet + numeric plots of one episode."""

from __future__ import annotations


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("view", help="image of one episode: frames grid and numeric plots (read-only)",
                       description="Write a PNG (or .jpg / .webp, by the file name) of one episode: up to "
                                   "--frames evenly spaced frames of an image key, and a line plot per "
                                   "numeric key.")
    p.add_argument("path", metavar="PATH", help="store to read (opened read-only)")
    p.add_argument("out", metavar="OUT.png", help="image file to write: .png, .jpg/.jpeg or .webp")
    p.add_argument("--episode", type=int, required=True, metavar="I", help="episode index (negative: from the end)")
    p.add_argument("--key", default=None, help="image key to show (default: the first image key)")
    p.add_argument("--frames", type=int, default=16, help="maximum frames in the grid (default 16)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 ok, 1 failed check, 2 bad input)."""
    from replaybuf_core.inspection.view import render_episode

    try:
        r = render_episode(args.path, args.episode, args.out, key=args.key, max_frames=args.frames)
    except IndexError as exc:
        raise ValueError(str(exc)) from None
    print(f"wrote {r['path']}: episode {r['episode']}, {len(r['frames'])} frames of {r['image_key']}, "
          f"plots of {', '.join(r['plotted']) or 'nothing'} ({r['size'][0]}x{r['size'][1]} px)")
    return 0
