"""``replaybuf formats``: list installed import and export formats, where they come from and what they
need."""

from __future__ import annotations

import json

from replaybuf_core import registry


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("formats", help="list installed import and export formats (replaybuf import / export FORMAT ...)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the formats; returns 0."""
    rows = [
        {"name": info.name, "direction": direction, "distribution": info.distribution, "version": info.version,
         "description": info.description, "extra": info.entrypoint.requires,
         "ready": registry.extra_ready(info.entrypoint.requires)}
        for direction, found in (("import", registry.list_formats()), ("export", registry.list_export_formats()))
        for info in found.values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max([16] + [len(r["name"]) for r in rows])
    print(f"{'format':<{width}} {'way':<7}{'distribution':<16} {'ready':<6} description")
    for r in rows:
        ready = "yes" if r["ready"] else "no"
        need = "" if r["ready"] else f"  (pip install 'replaybuf[{r['extra']}]')"
        print(f"{r['name']:<{width}} {r['direction']:<7}{str(r['distribution']):<16} {ready:<6} {r['description']}{need}")
    return 0
