"""``replaybuf backends``: list installed backends with distribution, version and capabilities."""

from __future__ import annotations

import json

from replaybuf_core import registry


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("backends", help="list installed storage backends")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 ok, 1 failed check, 2 bad input)."""
    rows = [
        {"name": info.name, "distribution": info.distribution, "version": info.version,
         "capabilities": sorted(info.capabilities), "description": info.description}
        for info in registry.list_backends().values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'backend':<10} {'distribution':<16} {'version':<9} capabilities")
    for r in rows:
        print(f"{r['name']:<10} {str(r['distribution']):<16} {str(r['version']):<9} "
              f"{', '.join(r['capabilities']) or '-'}    {r['description']}")
    return 0
