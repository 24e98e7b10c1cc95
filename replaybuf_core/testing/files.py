"""What a store directory holds, file by file: for checks that two writes made the same objects."""

from __future__ import annotations

import hashlib
import os

__all__ = ["file_digests", "without_version_times"]


def file_digests(root: str | os.PathLike) -> dict[str, str]:
    """``{path relative to root: SHA-256 hex}`` of every file under ``root``, leaving out replaybuf's
    own lock and lease files (``.replaybuf*``), which differ from one writer to the next; in a
    ``zarr.json`` the version log's ``time`` and ``command`` of each record (when and by what a
    version was made) are left out too — two processes writing the same content differ there."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.startswith(".replaybuf"):
                path = os.path.join(d, f)
                with open(path, "rb") as fh:
                    data = fh.read()
                if f == "zarr.json":
                    data = without_version_times(data)
                out[os.path.relpath(path, root)] = hashlib.sha256(data).hexdigest()
    return out


def without_version_times(data: bytes) -> bytes:
    """A ``zarr.json``'s bytes with the version log's ``time`` and ``command`` left out (the same
    bytes for anything else)."""
    import json

    from replaybuf_core.store.versions import VERSIONS

    try:
        doc = json.loads(data)
    except ValueError:
        return data
    log = (doc.get("attributes") or {}).get(VERSIONS) if isinstance(doc, dict) else None
    if not isinstance(log, list):
        return data
    doc["attributes"][VERSIONS] = [{k: v for k, v in r.items() if k not in ("time", "command")}
                                   if isinstance(r, dict) else r for r in log]
    return json.dumps(doc, sort_keys=True).encode()
