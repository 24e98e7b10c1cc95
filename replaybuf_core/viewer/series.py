"""One episode's numeric keys as plot data for the browser: every component of every numeric or
bool data key that is not a camera, with its names when the store keeps them (a LeRobot import's
``key_attrs[key]["names"]``), and ``*_is_pad``-style keys as marks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replaybuf_core.inspection.view import numeric_keys

#: at most this many points per line: a longer episode is sent every k-th step (``stride``)
MAX_POINTS = 5000
#: at most this many components of one key are sent (a (64, 64) "state" is not a plot)
MAX_COMPONENTS = 64


def component_names(key_attrs: dict[str, Any] | None, n: int) -> list[str] | None:
    """Names of the ``n`` flattened components of a key from what its source said about it
    (``{"names": [...]}``, LeRobot's ``{"names": {"motors": [...]}}``, or LeRobot v2.1's nested
    ``{"names": [[...]]}`` as the Unitree G1 data has it); None when they are missing or not exactly
    ``n`` strings."""
    names = (key_attrs or {}).get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, (list, tuple)) and len(names) == 1 and isinstance(names[0], (list, tuple)):
        names = names[0]
    if isinstance(names, (list, tuple)) and len(names) == n and all(isinstance(x, (str, int)) for x in names):
        return [str(x) for x in names]
    return None


def _listed(x: np.ndarray) -> list[list[float | None]]:
    """(points, components) floats → a list per component, NaN and infinities as None (JSON)."""
    return [[v if math.isfinite(v) else None for v in col] for col in x.T.tolist()]


def is_pad_key(key: str, dtype: np.dtype) -> bool:
    """A bool key that marks padded steps (``action_is_pad``, ``observation.state_is_pad``)."""
    return dtype == np.bool_ and key.endswith("is_pad")


def episode_series(rb: Any, episode: int) -> dict[str, Any]:
    """Plot data of episode ``episode`` (0-based, in range: the caller checks).

    Returns ``{"episode", "length", "stride", "steps" (the step of each point), "series": [{"key",
    "shape", "dtype", "names" (list or None), "components" (count in the key), "values" (a list per
    component sent, floats; NaN/inf as None), "low" / "high" (with ``stride`` > 1: each point's
    minimum and maximum over its ``stride`` steps, so a one-step spike still shows; else None),
    "pad" (bool key of ``*_is_pad`` style)}]}``.
    Components past :data:`MAX_COMPONENTS` are left out (``components`` says how many there are)."""
    sl = rb.get_episode_slice(episode)
    length = sl.stop - sl.start
    stride = max(1, math.ceil(length / MAX_POINTS))
    key_attrs = (rb.store.get_attrs("data") or {}).get("key_attrs") or {}
    out = []
    for key in numeric_keys(rb):
        dtype = np.dtype(rb.store.dtype("data", key))
        full = np.asarray(rb.store.read("data", key, sl.start, sl.stop))
        full = full.reshape(full.shape[0], -1)
        n = full.shape[1]
        full = full[:, :MAX_COMPONENTS].astype(np.float64)
        low = high = None
        if stride > 1 and length:
            starts = np.arange(0, length, stride)
            low = _listed(np.fmin.reduceat(full, starts, axis=0))
            high = _listed(np.fmax.reduceat(full, starts, axis=0))
        out.append({"key": key, "shape": list(rb.store.shape("data", key)[1:]), "dtype": str(dtype),
                    "names": component_names(key_attrs.get(key), n), "components": n,
                    "values": _listed(full[::stride]), "low": low, "high": high, "pad": is_pad_key(key, dtype)})
    return {"episode": int(episode), "length": int(length), "stride": stride,
            "steps": list(range(0, length, stride)), "series": out}
