"""``replaybuf mixture check MIX.toml [--json]``: open every store of a mixture file, apply the key
rules and print what it resolves to — keys, shapes, dtypes, weights, step offsets per store and what is
filled or padded — or the first refusal, naming the store and the key (exit 2)."""

from __future__ import annotations

import json


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("mixture", help="mixtures of stores: check a mixture file (read-only)",
                       description="Mixtures of stores sampled as one (docs/mixtures.md).")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    check = verbs.add_parser("check", help="resolve a mixture file against its stores and print the result",
                             description="Open every store of MIX (TOML, or YAML), apply the key map, fills, "
                                         "padding and fps rules, and print the resolved keys, shapes, weights, "
                                         "step offsets and what is padded.  Exit 2 with the first refusal.")
    check.add_argument("file", metavar="MIX", help="the mixture file (.toml, .yaml)")
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(func=run)


def _text(d: dict, origin: str) -> str:
    kind = "weighted draws" if d["weighted"] else "every window once"
    span = "all" if d["span"] is None else d["span"]  # None: all blocks in one permutation
    lines = [f"mixture {origin}: {len(d['sources'])} sources, {d['samples_per_epoch']:,} samples an epoch "
             f"({kind}), seed {d['seed']}, block {d['block']}, span {span}, fingerprint {d['fingerprint']}",
             "", "sources:"]
    for s in d["sources"]:
        fps = f"{s['fps']:g} fps" if s["fps"] is not None else "fps -"
        lines.append(f"  {s['name']}: {s['location']}")
        lines.append(f"    {s['episodes']:,} episodes, {s['windows']:,} windows, weight {s['weight']}, "
                     f"{100 * s['probability']:.2f} % of samples, {fps}")
        for k, v in s["delta_steps"].items():
            lines.append(f"    {k}: steps {v}")
    lines += ["", "keys:"]
    for k in d["keys"]:
        steps = f"{k['steps']} steps" if k["steps"] is not None else "anchor step"
        lines.append(f"  {k['name']}: {k['dtype']} {tuple(k['shape'])}, {steps}")
        for src, feed in k["feeds"].items():
            lines.append(f"    {src}: {feed}")
    lines += ["", "padded or filled:" if d["padded"] else "padded or filled: nothing"]
    lines += [f"  {p}" for p in d["padded"]]
    return "\n".join(lines)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 resolved, 2 refused)."""
    from replaybuf_core.mixture.describe import describe
    from replaybuf_core.mixture.mixture import Mixture

    d = describe(Mixture.from_toml(args.file))
    print(json.dumps(d, indent=2) if args.json else _text(d, args.file))
    return 0
