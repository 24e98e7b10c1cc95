"""What the HDF5 import formats share: opening a file with h5py (and hdf5plugin's filters when
installed), flattening nested groups into keys, exact dataset reads, attributes as JSON, and the
"T rows, T+1 rows or one row per episode" rule.

Keys: a dataset at ``obs/eef_pos`` inside an episode group becomes the key ``obs.eef_pos`` (store
keys cannot hold ``/``); the source path of each key is kept in its attributes (``source_path``).
Values are read as stored: the dtype, byte order included (``>f4`` stays ``>f4``).
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any

import numpy as np

#: filter ids h5py decodes itself (gzip, shuffle, fletcher32, szip, scale-offset, lzf)
BUILTIN_FILTERS = {1, 2, 3, 4, 6, 32000}


def require_h5py():
    """h5py (and hdf5plugin's filters, registered by importing it, when installed), or ImportError
    naming the extra that installs them."""
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ImportError("reading HDF5 datasets needs h5py: pip install 'replaybuf[hdf5]' (h5py, hdf5plugin)") from exc
    try:
        import hdf5plugin  # noqa: F401 - registers Blosc/Zstd/LZ4/bitshuffle filters with HDF5
    except ImportError:
        pass
    return h5py


def open_file(path: str | os.PathLike):
    """The HDF5 file at ``path``, read-only.  Raises FileNotFoundError, or ValueError naming the file
    when it is not HDF5."""
    h5py = require_h5py()
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"{p}: no such file")
    try:
        return h5py.File(p, "r")
    except OSError as exc:
        raise ValueError(f"{p}: not a readable HDF5 file ({exc})") from exc


def is_hdf5(path: str | os.PathLike) -> bool:
    """True when ``path`` is a file starting with the HDF5 signature (cheap; never raises)."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def member_names(path: str | os.PathLike, group: str = "/") -> list[str] | None:
    """The names in ``group`` of the HDF5 file at ``path``, or None when it is not an HDF5 file or
    holds no such group (what the formats' ``guess_can_open`` look at).

    Raises:
        DamagedSourceError: the file starts with the HDF5 signature but h5py cannot open it
            (truncated or damaged) — named, rather than "no format recognises it".
    """
    p = os.path.expanduser(os.fspath(path))
    if not (os.path.isfile(p) and is_hdf5(p)):
        return None
    try:
        f = open_file(p)
    except ValueError as exc:
        from replaybuf_core.errors import DamagedSourceError

        raise DamagedSourceError(f"{p}: an HDF5 file (by its signature) that h5py cannot open: truncated or "
                                 f"damaged ({exc.__cause__ or exc})") from exc
    try:
        with f:
            return list(f[group].keys()) if group in f else None
    except Exception:  # noqa: BLE001 - a group that cannot be listed: not this format's file
        return None


def natural_key(name: str) -> tuple:
    """Sort key putting ``demo_10`` after ``demo_9`` (robomimic's order; h5py lists names as text)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def datasets(group, prefix: str = "") -> dict[str, Any]:
    """Every dataset under ``group``, by its path relative to it (``obs/eef_pos``), in natural order."""
    h5py = require_h5py()
    out = {}
    for name in sorted(group.keys(), key=natural_key):
        path = f"{prefix}{name}"
        try:
            item = group[name]
        except KeyError as exc:  # a dangling soft or external link
            raise ValueError(f"{group.file.filename}: {group.name}/{name} cannot be opened ({exc})") from None
        if isinstance(item, h5py.Group):
            out.update(datasets(item, path + "/"))
        elif isinstance(item, h5py.Dataset):
            if item.shape is None:
                raise ValueError(f"{group.file.filename}: dataset {item.name} has no data (a null dataspace); "
                                 "nothing to import from it")
            out[path] = item
        # named datatypes are not data
    return out


def key_of(path: str) -> str:
    """The store key of a dataset path: ``/`` → ``.``."""
    return path.replace("/", ".")


def check_filters(ds, where: str) -> None:
    """Raise ValueError naming the dataset and the filter when h5py cannot decode ``ds`` here."""
    try:
        plist = ds.id.get_create_plist()
        n = plist.get_nfilters()
    except Exception:  # pragma: no cover - not every h5py build exposes the plist
        return
    h5z = require_h5py().h5z
    for i in range(n):
        fid = plist.get_filter(i)[0]
        if fid not in BUILTIN_FILTERS and not h5z.filter_avail(fid):
            raise ValueError(f"{where}: dataset {ds.name} uses HDF5 filter {fid} ({plist.get_filter(i)[3]!r}), which "
                             "is not available here; pip install hdf5plugin (Blosc, Zstd, LZ4, bitshuffle...)")


def read(ds, where: str) -> np.ndarray:
    """The whole dataset as stored (dtype and byte order kept; vlen strings as ``str`` objects).
    Raises ValueError naming ``where`` and the dataset for a filter or read failure."""
    check_filters(ds, where)
    try:
        if ds.dtype.kind == "O" or ds.dtype.kind == "S" and _is_vlen(ds):
            return _object_array(ds.asstr()[()] if _is_vlen_str(ds) else ds[()])
        return np.asarray(ds[()])
    except OSError as exc:
        raise ValueError(f"{where}: cannot read dataset {ds.name}: {exc}") from exc


def _is_vlen(ds) -> bool:
    return require_h5py().check_vlen_dtype(ds.dtype) is not None


def _is_vlen_str(ds) -> bool:
    return require_h5py().check_string_dtype(ds.dtype) is not None


def _object_array(values) -> np.ndarray:
    a = np.asarray(values, dtype=object)
    out = np.empty(a.shape, dtype=object)
    out[...] = a
    return out


def jsonable(value: Any) -> Any:
    """An HDF5 attribute value as JSON: arrays as lists, text as str, bytes that are not UTF-8 as
    ``{"base64": ...}`` (nothing is dropped)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return [jsonable(v) for v in value.tolist()]
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def attrs_of(obj) -> dict[str, Any]:
    """The attributes of an HDF5 object as a JSON-able dict."""
    return {str(k): jsonable(v) for k, v in obj.attrs.items()}


def maybe_json(text: Any) -> Any:
    """``text`` parsed when it is a JSON object or list (robomimic's ``env_args``), else as is."""
    if isinstance(text, str) and text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
