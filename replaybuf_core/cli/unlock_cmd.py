"""``replaybuf unlock URL|PATH``: break the writer lease of an object-storage store (a dead writer's, or
any with ``--force``), or with ``--force`` the writer lock of a local store's live or paused writer."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``unlock`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("unlock", help="break a store's writer lease (s3://...: lapsed, its writer dead, or --force) "
                                      "or lock (a local store: --force ends its writer)",
                       description="s3:// gs:// az://: break URL/.replaybuf.lease, the lease a writable open holds "
                                   "(it is left as a lapsed tombstone; the next writer fences the store against the "
                                   "old one before it writes). A dead writer's lease lapses by itself (60 s after its "
                                   "last renewal; REPLAYBUF_LEASE_SECONDS); without --force only a lapsed lease or one "
                                   "whose holder is a dead process of this host is broken. A local directory: a dead "
                                   "writer's lock is gone with it; --force ends the live (or stopped) process holding "
                                   "it with SIGKILL — what it committed stays.")
    p.add_argument("url", metavar="URL", help="the store's URL, e.g. s3://bucket/prefix.zarr, or a local store's path")
    p.add_argument("--force", action="store_true",
                   help="break the lease or lock of a writer that may be alive: on object storage it then fails its "
                        "next write instead of writing beside the next writer; a local one is ended (SIGKILL)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Break the lease or lock of the store at ``args.url`` through the backend that opens it; returns 0.
    Raises StoreLockedError for a lease that has not lapsed and whose holder is not known dead, or a
    local writer that is alive (without ``--force``), CapabilityError for a backend without locks."""
    from replaybuf_core import registry
    from replaybuf_core.errors import CapabilityError
    from replaybuf_core.locations import is_object_url

    entry = registry.guess_backend(args.url)
    break_lock = getattr(entry, "break_lock", None)
    if break_lock is None:
        raise CapabilityError(f"{args.url}: the {entry.name!r} backend keeps no lock a dead writer can leave behind")
    holder = break_lock(args.url, force=args.force)
    what = "lease" if is_object_url(args.url) else "lock"
    ended = "" if is_object_url(args.url) else " (ended with SIGKILL)"
    print(f"{args.url}: no {what} to break" if holder is None
          else f"{args.url}: broke the {what} held by {holder}{ended}")
    return 0
