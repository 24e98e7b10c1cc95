"""What a mixture is made of, as the user writes it: its sources (:class:`MixtureSource`) and its keys
(:class:`MixtureKey`), checked field by field when made; nothing here opens a store.

The checks that need the stores (keys present, dtypes, shapes, fps) are :mod:`.schema`'s, run by
:class:`~replaybuf_core.mixture.mixture.Mixture` before any sample is read.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["MixtureSource", "MixtureKey", "SIZE", "RESERVED_KEYS", "IS_PAD", "DIM_IS_PAD"]

#: ``weight=SIZE``: a source's share of samples is its share of windows (every window once an epoch)
SIZE = "size"
#: ``<key> + IS_PAD``: time padding (LeRobot's name) or a key the sample's store does not have
IS_PAD = "_is_pad"
#: ``<key> + DIM_IS_PAD``: bool (B, D) — the last-axis entries a store's shorter key was padded with
DIM_IS_PAD = "_dim_is_pad"
#: keys every mixture batch holds: which source, episode, anchor step and epoch position each sample is
RESERVED_KEYS = ("source_index", "source_episode", "source_frame", "mixture_position")


def _check_weight(name: str, weight: Any) -> float | str:
    if isinstance(weight, str):
        if weight != SIZE:
            raise ValueError(f"source {name!r}: weight must be a number > 0 or {SIZE!r}, got {weight!r}")
        return SIZE
    if isinstance(weight, (bool, np.bool_)) or not isinstance(weight, numbers.Real):
        raise TypeError(f"source {name!r}: weight must be a number > 0 or {SIZE!r}, got {type(weight).__name__}")
    w = float(weight)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"source {name!r}: weight must be a finite number > 0, got {weight!r}")
    return w


def _check_deltas(owner: str, deltas: Any) -> dict[str, tuple[float, ...]] | None:
    if deltas is None:
        return None
    if not isinstance(deltas, Mapping):
        raise TypeError(f"{owner}: delta_timestamps must be a mapping key -> [seconds, ...], got {type(deltas).__name__}")
    out = {}
    for key, values in deltas.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"{owner}: delta_timestamps[{key!r}] must be a list of seconds, got {values!r}")
        vals = list(values)
        if not vals or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real)
                           or not math.isfinite(float(v)) for v in vals):
            raise ValueError(f"{owner}: delta_timestamps[{key!r}] must be a non-empty list of finite seconds, got {values!r}")
        out[str(key)] = tuple(float(v) for v in vals)
    return out


def _default_name(location: Any) -> str:
    if callable(location):
        return getattr(location, "__name__", type(location).__name__)
    text = os.fspath(location).rstrip("/")
    base = text.rsplit("/", 1)[-1]
    return base[: -len(".zarr")] if base.endswith(".zarr") else base


@dataclass(frozen=True)
class MixtureSource:
    """One store of a mixture.

    Args:
        location: a store path, an ``s3://`` / ``gs://`` / ``az://`` URL (opened read-only with
            ``ReplayBuffer.create_from_path``), or a picklable no-argument callable returning a buffer
            (any backend).
        weight: probability that a sample comes from this store (relative: weights are normalised
            over the sources), or ``"size"`` (the default): its share of all windows.  Every source
            ``"size"``: each epoch visits every window of every store exactly once.  Numbers and
            ``"size"`` do not mix.
        keys: renames ``{store key: mixture key}``; a store key not renamed keeps its name.
        drop: store keys left out of the mixture.
        name: how errors, ``mixture check`` and per-source statistics call it; default the
            location's last path component without ``.zarr``.  Unique within a mixture.
        fps: frames per second of the store, for ``delta_timestamps``; default its ``fps`` attribute.
        delta_timestamps: ``{mixture key: [seconds, ...]}`` for this store instead of the mixture's
            (same number of offsets per key).
        episodes: store episode numbers to sample (LeRobot's ``episodes``); None: all.
        backend, storage_options: passed to ``ReplayBuffer.create_from_path``.
        cache_bytes: size of the store's decoded-chunk cache in bytes (an LRU; zarr backend), per
            process; None: the backend's default.

    Raises:
        TypeError, ValueError: a weight <= 0, NaN, infinite or of another type; a malformed key
            map, delta list or episode list (the message names the source).
    """

    location: Any
    weight: float | str = SIZE
    keys: Mapping[str, str] = field(default_factory=dict)
    drop: Sequence[str] = ()
    name: str | None = None
    fps: float | None = None
    delta_timestamps: Mapping[str, Sequence[float]] | None = None
    episodes: Sequence[int] | None = None
    backend: str | None = None
    storage_options: Mapping[str, Any] | None = None
    cache_bytes: int | None = None

    def __post_init__(self):
        loc = self.location
        if not (isinstance(loc, (str, os.PathLike)) or callable(loc)):
            raise TypeError(f"a mixture source is a store path, URL or a callable returning a buffer, got "
                            f"{type(loc).__name__}")
        name = str(self.name) if self.name is not None else _default_name(loc)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "weight", _check_weight(name, self.weight))
        if not isinstance(self.keys, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                         for k, v in self.keys.items()):
            raise TypeError(f"source {name!r}: keys must map store keys to mixture keys (str -> non-empty str), "
                            f"got {self.keys!r}")
        object.__setattr__(self, "keys", dict(self.keys))
        if isinstance(self.drop, str) or not all(isinstance(k, str) for k in self.drop):
            raise TypeError(f"source {name!r}: drop must be a list of store keys, got {self.drop!r}")
        object.__setattr__(self, "drop", tuple(self.drop))
        if self.fps is not None:
            if isinstance(self.fps, (bool, np.bool_)) or not isinstance(self.fps, numbers.Real) \
                    or not (math.isfinite(float(self.fps)) and float(self.fps) > 0):
                raise ValueError(f"source {name!r}: fps must be a finite number > 0, got {self.fps!r}")
            object.__setattr__(self, "fps", float(self.fps))
        object.__setattr__(self, "delta_timestamps", _check_deltas(f"source {name!r}", self.delta_timestamps))
        if self.episodes is not None:
            eps = list(self.episodes)
            if any(isinstance(e, (bool, np.bool_)) or not isinstance(e, numbers.Integral) or e < 0 for e in eps):
                raise TypeError(f"source {name!r}: episodes must be episode numbers (ints >= 0), got {self.episodes!r}")
            if len(set(eps)) != len(eps):
                raise ValueError(f"source {name!r}: episodes lists an episode more than once")
            object.__setattr__(self, "episodes", tuple(int(e) for e in eps))
        if self.cache_bytes is not None and (isinstance(self.cache_bytes, bool) or not isinstance(
                self.cache_bytes, numbers.Integral) or self.cache_bytes < 0):
            raise ValueError(f"source {name!r}: cache_bytes must be an int >= 0, got {self.cache_bytes!r}")

    @property
    def location_text(self) -> str:
        """The location as text (a callable's qualified name)."""
        loc = self.location
        if callable(loc):
            return f"{getattr(loc, '__module__', '?')}.{getattr(loc, '__qualname__', type(loc).__name__)}"
        return os.fspath(loc)

    def open(self) -> Any:
        """The store, opened read-only (a callable's buffer as it returns it), its cache sized.

        Raises:
            Errors of ``ReplayBuffer.create_from_path`` (FileNotFoundError, OSError, ...) with the
            source's name added in front.
        """
        if callable(self.location):
            buffer = self.location()
        else:
            from replaybuf_core.store.buffer import ReplayBuffer

            try:
                buffer = ReplayBuffer.create_from_path(
                    self.location, backend=self.backend,
                    storage_options=dict(self.storage_options) if self.storage_options else None)
            except (FileNotFoundError, OSError, ValueError) as exc:
                raise type(exc)(f"mixture source {self.name!r} ({self.location_text}): {exc}") from exc
        if self.cache_bytes is not None and hasattr(getattr(buffer, "store", None), "cache_bytes"):
            buffer.cache_bytes = int(self.cache_bytes)
        return buffer


@dataclass(frozen=True)
class MixtureKey:
    """How one key of the mixture is built from the stores' keys.

    Args:
        shape: the step shape every sample gets (without the batch and time axes); None: the
            stores' common shape (or, with ``pad_dims``, the longest last axis).
        dtype: the dtype; None: the stores' common one (dtypes of one kind promote, e.g. float32 and
            float64 give float64; different kinds need an explicit ``dtype``).  A store's values are
            cast to it when NumPy calls the cast ``same_kind``; any other is refused.
        fill: the value of this key for a store that does not have it (every slot flagged in
            ``<key>_is_pad``); None: every store must have the key.
        pad_dims: a store whose step shape has a shorter last axis (same leading axes) is padded at
            the end with ``fill`` (0 when None), flagged in ``<key>_dim_is_pad`` bool (B, D).  Never
            truncated: a longer axis is an error.

    Raises:
        TypeError, ValueError: a malformed shape, dtype or fill.
    """

    shape: Sequence[int] | None = None
    dtype: Any = None
    fill: Any = None
    pad_dims: bool = False

    def __post_init__(self):
        if self.shape is not None:
            if isinstance(self.shape, (str, bytes)) or not all(
                    isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 0 for s in self.shape):
                raise TypeError(f"shape must be a list of ints >= 0, got {self.shape!r}")
            object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if self.dtype is not None:
            try:
                object.__setattr__(self, "dtype", np.dtype(self.dtype))
            except TypeError as exc:
                raise TypeError(f"dtype {self.dtype!r} is not a NumPy dtype") from exc
        if not isinstance(self.pad_dims, (bool, np.bool_)):
            raise TypeError(f"pad_dims must be a bool, got {self.pad_dims!r}")
        if self.pad_dims and self.shape == ():
            raise ValueError("pad_dims needs a step shape with at least one axis")

    @classmethod
    def of(cls, value: Any) -> MixtureKey:
        """A :class:`MixtureKey` from itself, None (all defaults) or a mapping of its fields.

        Raises TypeError for another type or an unknown field (named)."""
        if isinstance(value, MixtureKey):
            return value
        if value is None:
            return cls()
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"shape", "dtype", "fill", "pad_dims"})
            if unknown:
                raise TypeError(f"unknown key settings {unknown} (known: shape, dtype, fill, pad_dims)")
            return cls(**dict(value))
        raise TypeError(f"a key's settings are a mapping (shape, dtype, fill, pad_dims), got {type(value).__name__}")

