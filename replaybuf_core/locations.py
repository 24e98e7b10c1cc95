"""Where a store lives: a local path or an object-storage URL — and never one taken for the other.

Object-storage URLs (``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``) are
opened by the zarr backend through zarr-python's ``ObjectStore`` over obstore.  Any other
``scheme://`` string is refused by name: ``s3:`` must never become a local directory called ``s3:``.
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["OBJECT_SCHEMES", "url_scheme", "is_object_url", "local_path", "check_apart"]

#: URL schemes of object stores (obstore's ``from_url``): S3, Google Cloud Storage, Azure Blob Storage
OBJECT_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def url_scheme(obj: Any) -> str | None:
    """The lower-case scheme of a ``scheme://...`` string or path, else None (a plain path)."""
    if not isinstance(obj, (str, os.PathLike)):
        return None
    m = _URL.match(os.fspath(obj))
    return m.group(1).lower() if m else None


def is_object_url(obj: Any) -> bool:
    """True for an object-storage URL (:data:`OBJECT_SCHEMES`)."""
    return url_scheme(obj) in OBJECT_SCHEMES


def local_path(obj: str | os.PathLike, what: str = "path") -> str:
    """``obj`` as a local path (``~`` expanded).

    Raises:
        ValueError: ``obj`` is a URL (``scheme://``): an object-storage URL where only a local path
            is taken, or an unknown scheme — named, never created as a local directory.
    """
    scheme = url_scheme(obj)
    if scheme is not None:
        known = "an object-storage URL" if scheme in OBJECT_SCHEMES else "a URL of an unknown scheme"
        raise ValueError(f"{what} {os.fspath(obj)!r} is {known} ({scheme}://), not a local path; object stores "
                         f"take {', '.join(s + '://' for s in OBJECT_SCHEMES[:1] + OBJECT_SCHEMES[2:4])} "
                         "where a store location is accepted")
    return os.path.expanduser(os.fspath(obj))


def _parts(location: str) -> tuple[str, ...]:
    """A location as comparable parts: a URL's scheme, bucket and keys; a local path resolved
    (symlinks, ``..``, ``~``) into its components."""
    scheme = url_scheme(location)
    if scheme is not None:
        return (scheme,) + tuple(p for p in location.split("://", 1)[1].split("/") if p not in ("", "."))
    return tuple(os.path.realpath(os.path.expanduser(location)).split(os.sep))


def check_apart(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Refuse a destination that is the source, lies inside it, or contains it (a copy or merge into
    itself would write into the store it reads, or replace a directory holding the source).

    Raises:
        ValueError: naming both locations and which holds which.
    """
    a, b = _parts(os.fspath(src)), _parts(os.fspath(dst))
    if a == b:
        raise ValueError(f"DST {os.fspath(dst)} is SRC: copy to another path")
    if b[:len(a)] == a:
        raise ValueError(f"DST {os.fspath(dst)} lies inside SRC {os.fspath(src)}: choose a destination outside it")
    if a[:len(b)] == b:
        raise ValueError(f"SRC {os.fspath(src)} lies inside DST {os.fspath(dst)}: replacing DST would delete it")
