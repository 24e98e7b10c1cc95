"""``replaybuf delete URL --yes``: delete a store on object storage (a partial import, say), safely."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``delete`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("delete", help="delete a store on object storage (s3:// gs:// az://)",
                       description="Delete every object of the zarr store at URL — the root metadata first, so a "
                                   "cut delete leaves no store with missing data. Takes the writer lease first: a "
                                   "store a live writer holds is refused. Local stores are directories: rm -r.")
    p.add_argument("url", metavar="URL", help="the store's URL, e.g. s3://bucket/prefix.zarr")
    p.add_argument("--yes", action="store_true", help="really delete it (required: nothing is deleted without it)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Delete the store at ``args.url`` through the backend that opens it; returns 0.  Raises ValueError without ``--yes``, and what the backend's
    ``delete_store`` raises (no store there, a writer's lease, a local path)."""
    from replaybuf_core import registry
    from replaybuf_core.errors import CapabilityError

    entry = registry.guess_backend(args.url)
    delete = getattr(entry, "delete_store", None)
    if delete is None:
        raise CapabilityError(f"{args.url}: the {entry.name!r} backend cannot delete a store")
    if not args.yes:
        raise ValueError(f"{args.url}: pass --yes to delete this store and every episode in it (nothing was deleted)")
    n = delete(args.url)
    print(f"{args.url}: deleted ({n} objects)")
    return 0
