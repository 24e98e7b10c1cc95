"""A mixture written down: a TOML file (``tomllib``, the standard library) or YAML (PyYAML, when
installed) that ``Mixture.from_toml`` and ``replaybuf mixture check`` both read.

Example (every field but ``sources[].path`` optional)::

    seed = 0
    # samples_per_epoch = 100_000      # weighted mixtures only; default: all windows
    # block = 64                       # locality of the order (object storage); span = 8

    [delta_timestamps]                 # seconds, converted at each store's own fps
    action = [0.0, 0.2, 0.4, 0.6]
    state = [-0.2, 0.0]

    [keys.state]
    pad_dims = true                    # shorter last axes padded with 0, flagged in state_dim_is_pad
    [keys.action]
    pad_dims = true
    [keys."image.primary"]
    fill = 0                           # stores without it: zeros, flagged in image.primary_is_pad

    [[sources]]
    path = "pusht.zarr"                # relative to this file; or s3://bucket/pusht.zarr
    weight = 2.0                       # or "size" (all sources alike)
    fps = 10                           # when the store has no fps attribute
    drop = ["keypoint", "n_contacts"]
    keys = { img = "image.primary" }   # store key -> mixture key

    [[sources]]
    path = "s3://bucket/g1.zarr"
    weight = 1.0
    keys = { "observation.state" = "state", "observation.images.cam_high" = "image.primary" }
"""

from __future__ import annotations

import os
from pathlib import Path

from replaybuf_core.locations import is_object_url

__all__ = ["load_definition", "definition_from_dict"]

_TOP = {"seed", "samples_per_epoch", "block", "span", "pad_mode", "tolerance_s", "delta_timestamps", "keys", "sources"}
_SOURCE = {"path", "weight", "keys", "drop", "name", "fps", "delta_timestamps", "episodes", "backend",
           "storage_options", "cache_bytes"}


def _read(path: Path) -> dict:
    text = path.read_bytes()
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - PyYAML ships with dask here
            raise ImportError(f"{path}: YAML mixtures need PyYAML (pip install pyyaml), or write it as TOML") from exc
        data = yaml.safe_load(text)
    else:
        import tomllib

        try:
            data = tomllib.loads(text.decode())
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a mixture file holds a table of settings, got {type(data).__name__}")
    return data


def definition_from_dict(data: dict, base: str | os.PathLike | None = None, origin: str = "the mixture") -> dict:
    """Keyword arguments of :class:`~replaybuf_core.mixture.mixture.Mixture` from a parsed file
    (``base``: the directory relative source paths start from).

    Raises:
        ValueError: an unknown setting, no sources, a source without a path (each named).
    """
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ValueError(f"{origin}: unknown settings {unknown} (known: {sorted(_TOP)})")
    sources = data.get("sources")
    if not isinstance(sources, list) or not sources:
        raise ValueError(f"{origin}: no [[sources]] (each with a path)")
    out = {k: v for k, v in data.items() if k != "sources"}
    srcs = []
    for i, s in enumerate(sources):
        if not isinstance(s, dict):
            raise ValueError(f"{origin}: sources[{i}] is not a table")
        bad = sorted(set(s) - _SOURCE)
        if bad:
            raise ValueError(f"{origin}: sources[{i}] has unknown settings {bad} (known: {sorted(_SOURCE)})")
        if "path" not in s:
            raise ValueError(f"{origin}: sources[{i}] has no path")
        s = dict(s)
        path = str(s.pop("path"))
        if not is_object_url(path):
            path = os.path.expanduser(path)
            if base is not None and not os.path.isabs(path):
                path = os.path.join(os.fspath(base), path)
        srcs.append({"location": path, **s})
    out["sources"] = srcs
    return out


def load_definition(path: str | os.PathLike) -> dict:
    """Keyword arguments of :class:`~replaybuf_core.mixture.mixture.Mixture` from a TOML (or YAML)
    file; relative source paths are relative to the file.

    Raises:
        FileNotFoundError: no such file.  ValueError: not valid TOML, an unknown setting (named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no mixture file at {path}")
    return definition_from_dict(_read(path), path.resolve().parent, str(path))
