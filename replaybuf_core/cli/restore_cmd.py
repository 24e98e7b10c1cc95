"""``replaybuf restore PATH VERSION``: make a store what it was at a version (itself a new version:
the state before can be restored again; crash-safe; frames moved as stored bytes)."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``restore`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("restore", help="make a store what it was at a version (undo edits)",
                       description="Restore a version of a store (see `replaybuf log`). The restore is a "
                                   "version too: the state before it stays in the log.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("version", metavar="VERSION", help="a version id, a tag, or -N (N back)")
    p.add_argument("-m", "--message", default=None, help="the new version's message")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    """Restore; returns 0.  Raises VersionNotFoundError naming the known versions."""
    from replaybuf_core.store.buffer import ReplayBuffer

    with ReplayBuffer(args.path) as rb:
        before = (rb.n_episodes, rb.n_steps)
        report = rb.restore(args.version, message=args.message, progress=not args.no_progress)
        print(f"{args.path}: {before[0]} episodes / {before[1]} steps -> {rb.n_episodes} episodes / {rb.n_steps} "
              f"steps (version {rb.version['id']}: {rb.version['message']})")
        for line in report.lines():
            print(line)
    return 0
