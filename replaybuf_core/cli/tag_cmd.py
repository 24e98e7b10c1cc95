"""``replaybuf tag PATH NAME [VERSION]``: name a version of a store (default the current one), so that
``ReplayBuffer(path, version=NAME)`` and ``replaybuf restore PATH NAME`` find it, and ``gc`` keeps it;
``replaybuf tag PATH NAME --delete`` removes the name."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``tag`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("tag", help="name a version of a store", description="Name a version (default: the current "
                       "one, recording appends not yet a version first).")
    p.add_argument("path", metavar="PATH")
    p.add_argument("name", metavar="NAME")
    p.add_argument("version", metavar="VERSION", nargs="?", default=None, help="a version id, a tag, or -N (N back)")
    p.add_argument("--delete", action="store_true", help="remove the tag NAME (gc may then drop its version)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Tag the version (or remove the tag); returns 0.  Raises VersionNotFoundError (an unknown
    version or tag) / ValueError (a bad name, or ``--delete`` with a version)."""
    from replaybuf_core.store.buffer import ReplayBuffer
    from replaybuf_core.store.versions import note_appends, tag, tags, untag

    if args.delete:
        if args.version is not None:
            raise ValueError(f"tag --delete removes the tag {args.name!r}; it takes no VERSION (got {args.version!r})")
        with ReplayBuffer(args.path) as rb:
            vid = untag(rb.store, args.name)
        print(f"{args.path}: tag {args.name!r} removed (it named version {vid}, which gc may now drop)")
        return 0
    with ReplayBuffer(args.path) as rb:
        note_appends(rb.store, rb.n_episodes, rb.n_steps, force=True)
        before = tags(rb.store).get(args.name)
        vid = tag(rb.store, args.name, "-1" if args.version is None else args.version)
    moved = f" (moved from version {before})" if before is not None and before != vid else ""
    print(f"{args.path}: version {vid} is tagged {args.name!r}{moved}")
    return 0
