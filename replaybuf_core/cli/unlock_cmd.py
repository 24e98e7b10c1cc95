"""``replaybuf unlock URL``: break the writer lease a dead writer left on an object-storage store."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``unlock`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("unlock", help="break the writer lease of a store on object storage (lapsed, its writer dead, or --force)",
                       description="Delete URL/.replaybuf.lease, the lease a writable open of an s3:// / gs:// / "
                                   "az:// store holds. A dead writer's lease lapses by itself (60 s after its last "
                                   "renewal; REPLAYBUF_LEASE_SECONDS); without --force only a lapsed lease or one "
                                   "whose holder is a dead process of this host is broken.")
    p.add_argument("url", metavar="URL", help="the store's URL, e.g. s3://bucket/prefix.zarr")
    p.add_argument("--force", action="store_true",
                   help="break a lease that has not lapsed (its holder may be alive: it then fails its next commit "
                        "instead of writing beside the next writer)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Break the lease of the store at ``args.url`` through the backend that opens it; returns 0.
    Raises ValueError for a local path, StoreLockedError for a lease that has not lapsed and whose
    holder is not known dead (without ``--force``)."""
    from replaybuf_core import registry
    from replaybuf_core.errors import CapabilityError

    entry = registry.guess_backend(args.url)
    break_lock = getattr(entry, "break_lock", None)
    if break_lock is None:
        raise CapabilityError(f"{args.url}: the {entry.name!r} backend keeps no lock a dead writer can leave behind")
    holder = break_lock(args.url, force=args.force)
    print(f"{args.url}: no lease to break" if holder is None else f"{args.url}: broke the lease held by {holder}")
    return 0
