"""Short human-readable codec descriptions for the CLI (no zarr import: duck-typed)."""

from __future__ import annotations

from typing import Any

_DROP = {"typesize", "blocksize", "id", "checksum"}


def describe_codec(codec: Any) -> str:
    """``"blosc(cname=lz4, clevel=5, shuffle=noshuffle)"``-style text for a zarr v3 codec, a
    numcodecs codec, a dict spec or None (``"none"``)."""
    if codec is None:
        return "none"
    if isinstance(codec, dict):
        name, config = codec.get("name", "?"), codec.get("configuration", {})
    elif hasattr(codec, "to_dict"):
        d = codec.to_dict()
        name, config = d.get("name", type(codec).__name__), d.get("configuration", {})
    elif hasattr(codec, "get_config"):
        config = dict(codec.get_config())
        name = config.pop("id", type(codec).__name__)
    else:
        return repr(codec)
    shuffle_names = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "autoshuffle"}
    parts = []
    for k, v in config.items():
        if k in _DROP:
            continue
        if k == "shuffle" and isinstance(v, int):
            v = shuffle_names.get(v, v)
        parts.append(f"{k}={getattr(v, 'value', v)}")
    return f"{name}({', '.join(parts)})" if parts else str(name)
