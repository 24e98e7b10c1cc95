"""``replaybuf log PATH``: the versions of a store, newest first (id, time, kind, episodes, steps,
tags, message, command; :mod:`replaybuf_core.store.versions`)."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``log`` to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("log", help="list a store's versions (every append session, edit, restore)",
                       description="List the versions of a store, newest first: every writable session that "
                                   "appended episodes, every edit and every restore is one.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("-n", type=int, default=None, metavar="N", help="only the newest N")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the log; returns 0."""
    from replaybuf_core.store.buffer import ReplayBuffer
    from replaybuf_core.store.versions import log, tags

    with ReplayBuffer(args.path, read_only=True) as rb:
        versions, names = log(rb.store), tags(rb.store)
        pending = rb.n_episodes != (versions[-1]["n_episodes"] if versions else 0) or \
            rb.n_steps != (versions[-1]["n_steps"] if versions else 0)
        if pending:
            print(f"(not yet a version: {rb.n_episodes} episodes, {rb.n_steps} steps committed since the newest)")
    if not versions:
        print(f"{args.path}: no versions recorded (never edited; appends are recorded when a writable buffer closes)")
    by_id: dict[int, list[str]] = {}
    for name, vid in names.items():
        by_id.setdefault(vid, []).append(name)
    for v in list(reversed(versions))[: args.n]:
        tag = f" [{', '.join(sorted(by_id[v['id']]))}]" if v["id"] in by_id else ""
        print(f"{v['id']:>5}  {v['time']}  {v['kind']:<16} {v['n_episodes']:>7} episodes {v['n_steps']:>10} steps"
              f"{tag}  {v['message']}")
        print(f"       $ {v['command']}")
    return 0
