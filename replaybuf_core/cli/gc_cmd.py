"""``replaybuf gc PATH --keep N | --older-than DAYS``: drop old versions and the bytes only they hold
(crash-safe; a version a reader has open is kept: :func:`replaybuf_core.store.versions.gc`)."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``gc`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("gc", help="drop old versions of a store, freeing what only they hold",
                       description="Drop old versions (they can no longer be read or restored). A version "
                                   "that a reader has open, and every newer one, is kept.")
    p.add_argument("path", metavar="PATH")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--keep", type=int, metavar="N", help="keep the newest N versions")
    g.add_argument("--older-than", type=float, metavar="DAYS", help="drop versions older than DAYS days")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run gc; returns 0."""
    import datetime

    from replaybuf_core import locking
    from replaybuf_core.store.buffer import ReplayBuffer
    from replaybuf_core.store.versions import gc

    older = None if args.older_than is None else datetime.timedelta(days=args.older_than)
    with ReplayBuffer(args.path) as rb:
        report = gc(rb.store, keep=args.keep, older_than=older, store_dir=locking.lock_dir_of(rb.store))
        rb._persist()
    for line in report.lines():
        print(f"{args.path}: {line}")
    return 0
