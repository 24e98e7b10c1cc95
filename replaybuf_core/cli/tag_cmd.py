"""``replaybuf tag PATH NAME [VERSION]``: name a version of a store (default the current one), so that
``ReplayBuffer(path, version=NAME)`` and ``replaybuf restore PATH NAME`` find it."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``tag`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("tag", help="name a version of a store", description="Name a version (default: the current "
                       "one, recording appends not yet a version first).")
    p.add_argument("path", metavar="PATH")
    p.add_argument("name", metavar="NAME")
    p.add_argument("version", metavar="VERSION", nargs="?", default="-1", help="a version id, a tag, or -N (N back)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Tag the version; returns 0.  Raises VersionNotFoundError / ValueError (a bad name)."""
    from replaybuf_core.store.buffer import ReplayBuffer
    from replaybuf_core.store.versions import note_appends, tag

    with ReplayBuffer(args.path) as rb:
        note_appends(rb.store, rb.n_episodes, rb.n_steps, force=True)
        vid = tag(rb.store, args.name, args.version)
    print(f"{args.path}: version {vid} is tagged {args.name!r}")
    return 0
