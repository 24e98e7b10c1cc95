"""``replaybuf stats PATH [--key KEY] [--json]``: normalisation statistics of a store's numeric keys
(count, mean, std, min, max, q01..q99 per feature dimension; camera frames per channel)."""

from __future__ import annotations

import json

import numpy as np

from replaybuf_core.cluster.clients import add_cluster_arguments, client_for


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("stats", help="normalisation statistics of the numeric keys (read-only)",
                       description="Per key and feature dimension: count, mean, std, min, max and the "
                                   "q01/q10/q50/q90/q99 quantiles (LeRobot's names); camera frames per "
                                   "channel on x / 255.  Quantiles of floats are within 0.39 % of the true "
                                   "order statistic; frames and small integers are exact.  Statistics stored "
                                   "in the store are used, with the episodes recorded since merged in.")
    p.add_argument("path", metavar="PATH", help="store (opened read-only unless --save)")
    p.add_argument("--key", action="append", default=None, metavar="KEY", help="only this key (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON (lists of numbers)")
    p.add_argument("--save", action="store_true",
                   help="open the store writable and save the statistics in it (meta/replaybuf_stats), so "
                        "later calls read only the episodes recorded since; imports save them already")
    p.add_argument("--recompute", action="store_true",
                   help="ignore the stored statistics and compute them from the data (with --save: replace "
                        "them, e.g. after `replaybuf verify` found them disagreeing with the data)")
    add_cluster_arguments(p, "compute")
    p.set_defaults(func=run)


def _fmt(v) -> str:
    flat = [float(x) for x in v.ravel()]
    shown = ", ".join(f"{x:.6g}" for x in flat[:8])
    return f"[{shown}{', ...' if len(flat) > 8 else ''}]"


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 done, 2 bad input)."""
    import os
    import sys

    from replaybuf_core.store.buffer import ReplayBuffer

    path = os.path.expanduser(args.path)
    with (ReplayBuffer(path) if args.save else ReplayBuffer.create_from_path(path)) as rb, client_for(args) as client:
        summarizer = None
        if client is not None:
            from replaybuf_core.cluster.copy import endpoint_of
            from replaybuf_core.cluster.stats import cluster_summarizer

            if not args.recompute:
                print("note: stored statistics are used as they are; only episodes recorded since they were "
                      "saved are computed on the cluster (--recompute computes every episode there)",
                      file=sys.stderr)

            where = endpoint_of(rb.store)  # an absolute path (workers need not share our cwd) or a URL
            summarizer = cluster_summarizer(client, where.location, where.storage_options, where.backend)
        stats = rb.get_stats(args.key, recompute=args.recompute, summarizer=summarizer)
    if args.save:
        print(f"saved the statistics in {path} (meta/replaybuf_stats)", file=sys.stderr)
    if args.json:
        def finite(v):  # strict JSON: NaN / inf (a NaN in the data, an empty store) become null
            return [finite(x) for x in v] if isinstance(v, list) else (v if v is None or np.isfinite(v) else None)

        print(json.dumps({k: {s: finite(v.tolist()) for s, v in d.items()} for k, d in stats.items()}, indent=1,
                         allow_nan=False))
        return 0
    for key, d in stats.items():
        print(f"{key}: count {int(d['count'][0])}")
        for name in ("mean", "std", "min", "max", "q01", "q50", "q99"):
            print(f"  {name:<4} {_fmt(d[name])}")
    return 0
