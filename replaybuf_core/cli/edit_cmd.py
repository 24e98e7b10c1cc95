"""``replaybuf edit delete|trim|keep PATH ...``: edit a store in place (crash-safe; see
:mod:`replaybuf_core.store.editing`).  Bad indices or ranges are refused with nothing changed.  On
camera keys with a lossy codec (JPEG, video) the edit re-encodes the kept frames it moves: a note per
key says how many and their worst PSNR against before the edit."""

from __future__ import annotations


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("edit", help="delete episodes, trim an episode, keep a subset (in place, crash-safe)",
                       description="Edit a store in place.  Each edit is crash-safe (a kill leaves the old "
                                   "or the new store) and rewrites only from the first changed row on; "
                                   "per-episode meta arrays follow.  Needs the store to itself (no readers).")
    edits = p.add_subparsers(dest="edit", metavar="EDIT", required=True)
    d = edits.add_parser("delete", help="delete episodes", description="Delete episodes by index.")
    d.add_argument("path", metavar="PATH")
    d.add_argument("episodes", metavar="EPISODES", nargs="+",
                   help="indices or Python slices, e.g. 3 7 10:20 -1 (negative from the end)")
    d.add_argument("--all", action="store_true", dest="delete_all",
                   help="confirm a selection that deletes every episode (refused without it)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=run)
    t = edits.add_parser("trim", help="keep steps [START, STOP) of one episode",
                         description="Drop idle frames at either end of one episode.")
    t.add_argument("path", metavar="PATH")
    t.add_argument("--episode", type=int, required=True, metavar="I")
    t.add_argument("--start", type=int, default=0, metavar="A", help="first step kept (default 0)")
    t.add_argument("--stop", type=int, default=None, metavar="B", help="one past the last step kept (default: the end)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=run)
    k = edits.add_parser("keep", help="keep the episodes a bool meta array marks",
                         description="Keep only the episodes where meta array NAME (bool, one per episode) is True.")
    k.add_argument("path", metavar="PATH")
    k.add_argument("--mask", required=True, metavar="NAME")
    k.add_argument("--no-progress", action="store_true", help="no progress bar")
    k.set_defaults(func=run)


def run(args) -> int:
    """Run the edit with parsed ``args``; returns the exit code (0 done, 2 refused)."""
    from replaybuf_core.importing.arguments import parse_episodes
    from replaybuf_core.store.buffer import ReplayBuffer

    with ReplayBuffer(args.path) as rb:
        before = (rb.n_episodes, rb.n_steps)
        if args.edit == "delete":
            chosen = parse_episodes(",".join(args.episodes), rb.n_episodes, f"the store {args.path}")
            if rb.n_episodes and len(set(int(i) for i in chosen)) == rb.n_episodes and not args.delete_all:
                raise ValueError(f"{' '.join(args.episodes)} selects all {rb.n_episodes} episodes of {args.path}: "
                                 "pass --all to delete every episode (nothing was changed)")
            report = rb.delete_episodes(chosen, progress=not args.no_progress)
        elif args.edit == "trim":
            report = rb.trim_episode(args.episode, args.start, args.stop, progress=not args.no_progress)
        else:
            report = rb.keep_episodes(args.mask, progress=not args.no_progress)
        print(f"{args.path}: {before[0]} episodes / {before[1]} steps -> {rb.n_episodes} episodes / {rb.n_steps} steps")
        for line in report.lines():  # kept frames a lossy codec (JPEG, video) encoded again
            print(line)
        dead = _dead_fraction(args.path, rb.store)
    if dead is not None:
        _reclaim_dead_space(args.path, rb.backend)
    return 0


#: an edit that leaves this fraction of the store's file dead or more repacks it (when the backend can:
#: HDF5's ``compact``): the file stays within 4/3 of its live bytes, and a repack (a copy of the live
#: bytes, chunks as stored: 0.09 s for a 6 MB file whose trim took 3.1 s) costs at most 3x the dead
#: bytes the edits since the last one left
RECLAIM_FRACTION = 0.25


def _dead_fraction(path: str, store) -> float | None:
    """The fraction of the store's file an edit left dead, when it is :data:`RECLAIM_FRACTION` or more: a
    backend that never reuses freed space (HDF5) declares the dead bytes (the optional
    ``reclaimable_bytes`` verb); else None."""
    import os

    measure = getattr(store, "reclaimable_bytes", None)
    if not callable(measure) or not os.path.isfile(path):
        return None
    size = os.path.getsize(path)
    dead = int(measure()) / size if size else 0.0
    return dead if dead >= RECLAIM_FRACTION else None


def _reclaim_dead_space(path: str, backend: str) -> None:
    """Repack the store's file (its closed buffer's backend's optional ``compact`` verb: built beside,
    swapped in) and say how much it gave back — or, without ``compact``, say how to."""
    import os

    from replaybuf_core import registry

    store = registry.get_backend(backend).open(path)
    try:
        compact = getattr(store, "compact", None)
        if callable(compact):
            before, after = compact()
            print(f"repacked {path}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB ({(before - after) / 2**20:.1f} "
                  f"MiB the edit left dead given back; this backend does not reuse freed space)")
            return
        size = os.path.getsize(path)
        dead = int(store.reclaimable_bytes())
        print(f"note: {dead / 2**20:.1f} MiB of the {size / 2**20:.1f} MiB file hold no data any more (this backend "
              f"does not reuse freed space); `replaybuf copy {path} NEW{os.path.splitext(path)[1]} --backend "
              f"{backend}` writes a compact copy")
    finally:
        store.close()
