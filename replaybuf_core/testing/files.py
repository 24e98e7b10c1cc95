"""What a store directory holds, file by file: for checks that two writes made the same objects."""

from __future__ import annotations

import hashlib
import os

__all__ = ["file_digests"]


def file_digests(root: str | os.PathLike) -> dict[str, str]:
    """``{path relative to root: SHA-256 hex}`` of every file under ``root``, leaving out replaybuf's
    own lock and lease files (``.replaybuf*``), which differ from one writer to the next."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.startswith(".replaybuf"):
                path = os.path.join(d, f)
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out
