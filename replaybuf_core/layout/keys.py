"""What may be a key: the names data and meta arrays may take (they become file names and group
members in every backend), and the reserved temp names of rechunks and edits."""

from __future__ import annotations

from typing import Any

#: prefix of rechunk temp arrays (``_temp.<key>``, ``_temp_old.<key>``) and edit backups (``_temp_undo.<key>``)
TMP_KEY = "_temp"


def temp_names(name: str, tmp_key: str = TMP_KEY) -> tuple[str, str]:
    """``(temp, backup)`` array names a rechunk uses while rewriting array ``name``."""
    return f"{tmp_key}.{name}", f"{tmp_key}_old.{name}"


def is_temp_name(name: str) -> bool:
    """True for the names of rechunk temp arrays (``_temp.<x>``, ``_temp_old.<x>``, and the bare
    ``_temp`` / ``_temp_old`` of older versions) and of edit backups (``_temp_undo.<x>``, see
    :mod:`replaybuf_core.store.editing`) and versions' undos (``_temp_ver.<id>.<x>``, see
    :mod:`replaybuf_core.store.versions`): they are reserved, never data keys."""
    return name in (TMP_KEY, TMP_KEY + "_old") or name.startswith(
        (TMP_KEY + ".", TMP_KEY + "_old.", TMP_KEY + "_undo.", TMP_KEY + "_ver."))


#: characters no key may hold: path separators of any platform (zarr, HDF5 and the file system
#: would read ``a\b`` as a path), and control characters
_BAD_KEY_CHARS = frozenset("/\\") | frozenset(chr(c) for c in range(32)) | {chr(127)}


#: names a store's own files use (zarr v3/v2 metadata, the writer lock): never keys
_RESERVED_KEYS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", ".replaybuf.lock"})
#: longest key (UTF-8 bytes): a file name holds 255, rechunk temp names add ``_temp_old.``
MAX_KEY_BYTES = 240


def check_key(key: Any, what: str = "data key") -> None:
    """Refuse a name that cannot be a key of a store (``key`` of a data or meta array).

    Raises:
        TypeError: ``key`` is not a str.
        ValueError: empty, ``.``/``..``, holding ``/``, a backslash or a control character, longer than
            :data:`MAX_KEY_BYTES` UTF-8 bytes, a store's own file name, or a rechunk/edit temp name.
    """
    if not isinstance(key, str):
        raise TypeError(f"{what} must be a str, got {type(key).__name__} {key!r}")
    if key == "" or key in (".", "..") or set(key) & _BAD_KEY_CHARS:
        raise ValueError(f"{what} {key!r} is invalid: keys must be non-empty, not '.'/'..', and hold "
                         "no '/', no backslash and no control character")
    if key in _RESERVED_KEYS:
        raise ValueError(f"{what} {key!r} is reserved: stores keep their own metadata under that name")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"{what} {key[:40]!r}... is {len(key.encode('utf-8'))} bytes long: keys hold at most "
                         f"{MAX_KEY_BYTES} (they become file names)")
    if is_temp_name(key):
        raise ValueError(f"{what} {key!r} is reserved for the temp arrays of rechunks, edits and versions "
                         "('_temp', '_temp.*', '_temp_old*', '_temp_undo.*', '_temp_ver.*')")
