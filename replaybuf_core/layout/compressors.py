"""Compressor presets (numcodecs codecs, so replaybuf_core needs no zarr import)."""

from __future__ import annotations

from typing import Any

import numcodecs

COMPRESSOR_PRESETS = ("default", "disk")


def resolve_compressor(compressor: Any = "default") -> Any:
    """Turn a preset name into a codec; a codec object passes through.

    Presets (the seed's, from diffusion_policy):
        ``"default"``: ``numcodecs.Blosc(cname="lz4", clevel=5, shuffle=NOSHUFFLE)`` — fast to decode.
        ``"disk"``: ``numcodecs.Blosc(cname="zstd", clevel=5, shuffle=BITSHUFFLE)`` — smaller files.
    ``None`` means no compression and passes through.

    Raises:
        ValueError: an unknown preset name (the seed passed it through silently).
        TypeError: ``compressor`` is a bool or a number.
    """
    if isinstance(compressor, str):
        if compressor == "default":
            return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE)
        if compressor == "disk":
            return numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE)
        raise ValueError(f"unknown compressor name {compressor!r}; presets are {COMPRESSOR_PRESETS} "
                         "or pass a codec object")
    if isinstance(compressor, (bool, int, float)):
        raise TypeError(f"compressor must be a preset name, a codec or None, got {compressor!r}")
    return compressor
