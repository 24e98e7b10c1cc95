"""``replaybuf diff PATH V1 [V2]``: episodes removed, added and changed from version V1 to V2 (default
the current one; :mod:`replaybuf_core.inspection.version_diff`)."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``diff`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("diff", help="episodes added, removed and changed between two versions",
                       description="Compare two versions of a store episode by episode (by the content of "
                                   "every key that is not camera frames).")
    p.add_argument("path", metavar="PATH")
    p.add_argument("v1", metavar="V1", help="a version id, a tag, or -N (N back)")
    p.add_argument("v2", metavar="V2", nargs="?", default="-1", help="default: the current version")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the diff; returns 0."""
    from replaybuf_core.inspection.version_diff import diff_versions

    for line in diff_versions(args.path, args.v1, args.v2).lines():
        print(line)
    return 0
