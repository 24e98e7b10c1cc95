"""``replaybuf info PATH [--json]``: episodes, steps, episode lengths, per-key layout and bytes."""

from __future__ import annotations

import json


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("info", help="summarise a replay buffer (read-only)",
                       description="Episodes, steps, episode lengths and, per data key, shape, dtype, "
                                   "chunks, shards, codec, bytes stored and compression ratio.")
    p.add_argument("path", metavar="PATH", help="store to inspect (opened read-only)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 ok, 1 failed check, 2 bad input)."""
    from replaybuf_core.inspection.summary import buffer_info, format_info

    info = buffer_info(args.path)
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0
