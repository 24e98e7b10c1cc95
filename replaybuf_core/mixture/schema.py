"""The keys of a mixture resolved against its stores: which store key feeds each mixture key, the
dtype and step shape every sample gets, what is filled or padded, and each store's step offsets at
its own fps.  Pure functions of what the stores declare (:class:`StoreInfo`), so every refusal
happens before a sample is read, and names the source and the key.

Rules (each one explicit; nothing is truncated or converted silently):

* **Key map.**  A store key ``k`` feeds mixture key ``source.keys.get(k, k)`` unless ``k`` is in
  ``source.drop``.  Two store keys of one store feeding one mixture key: refused.  A renamed key the
  store does not have: refused.  The mixture's keys are the ``keys`` given, else every mixture key
  some store feeds.  A store key feeding no mixture key is not read.
* **Absent keys.**  A store without a mixture key is refused unless the key has a ``fill``: its
  samples then hold ``fill`` and ``<key>_is_pad`` is all True.
* **Dtypes.**  Without a ``dtype``, the stores' dtypes must share a kind (bool, signed, unsigned,
  float, string; signed and unsigned integers count as one) and are promoted
  (``np.result_type``); with one, each store's dtype must cast to it ``same_kind``.
* **Shapes.**  Without ``pad_dims``, every store's step shape equals the key's (``shape`` or the
  common one).  With it, shapes may differ in the last axis only, each no longer than the key's;
  the missing entries hold ``fill`` (0 when None) and ``<key>_dim_is_pad`` flags them.
* **Time.**  ``delta_timestamps`` (seconds, per mixture key; a source may give its own, with the same
  number of offsets) become step offsets at each store's fps (``round(delta * fps)``, each delta a
  multiple of ``1 / fps`` within ``tolerance_s``: LeRobot's rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from replaybuf_core.layout.frames import is_frames
from replaybuf_core.sampling.window_sampler import delta_timestamps_to_steps

from .spec import DIM_IS_PAD, IS_PAD, RESERVED_KEYS, MixtureKey, MixtureSource

__all__ = ["StoreInfo", "ResolvedKey", "ResolvedSource", "resolve"]


@dataclass(frozen=True)
class StoreInfo:
    """What a store declares: ``{key: (stored dtype, step shape)}`` and its ``fps`` attribute (or None)."""

    keys: Mapping[str, tuple[np.dtype, tuple[int, ...]]]
    fps: float | None = None


@dataclass
class ResolvedKey:
    """One mixture key: ``dtype``, step ``shape``, ``n_steps`` offsets (None: read at the anchor),
    ``fill`` (absent stores / padded entries), ``pad_dims``, ``optional`` (some store lacks it),
    and per source the feeding store key (None: absent), its step shape and dtype."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    n_steps: int | None
    fill: Any
    pad_dims: bool
    store_keys: list[str | None] = field(default_factory=list)
    source_shapes: list[tuple[int, ...] | None] = field(default_factory=list)
    source_dtypes: list[np.dtype | None] = field(default_factory=list)

    @property
    def optional(self) -> bool:
        return any(k is None for k in self.store_keys)

    @property
    def has_is_pad(self) -> bool:
        """Batches hold ``<name>_is_pad``: (B, n_steps) with offsets, (B,) for an optional key without."""
        return self.n_steps is not None or self.optional

    @property
    def pad_value(self) -> Any:
        """The value of absent samples and padded entries."""
        if self.fill is not None:
            return self.fill
        return "" if self.dtype.kind in "OUST" else 0


@dataclass
class ResolvedSource:
    """One store: ``renames`` ``{store key: mixture key}`` of the keys read, ``delta_steps``
    ``{store key: int64 offsets}`` and its ``fps`` (None when no key needs one)."""

    index: int
    name: str
    renames: dict[str, str]
    delta_steps: dict[str, np.ndarray]
    fps: float | None


def _kind(dtype: np.dtype) -> str:
    k = dtype.kind
    return {"i": "int", "u": "int", "f": "float", "b": "bool", "U": "str", "T": "str", "O": "str", "S": "bytes"}.get(k, k)


def _common_dtype(name: str, spec: MixtureKey, feeds: list[tuple[str, np.dtype]]) -> np.dtype:
    if spec.dtype is not None:
        target = np.dtype(spec.dtype)
        strings = _kind(target) == "str"
        for src, dt in feeds:
            ok = (_kind(dt) == "str") if strings else (_kind(dt) != "str" and np.can_cast(dt, target, "same_kind"))
            if not ok:
                raise TypeError(f"mixture key {name!r}: source {src!r} holds {dt}, which does not cast to the "
                                f"key's dtype {target} (same_kind casts only)")
        return np.dtype(object) if strings else target
    kinds = {_kind(dt) for _, dt in feeds}
    if len(kinds) > 1:
        shown = ", ".join(f"{src!r}: {dt}" for src, dt in feeds)
        raise TypeError(f"mixture key {name!r} is fed with incompatible dtypes ({shown}); give the key a dtype")
    if kinds == {"str"}:
        return np.dtype(object)
    return np.result_type(*[dt for _, dt in feeds])


def _common_shape(name: str, spec: MixtureKey, feeds: list[tuple[str, tuple[int, ...]]]) -> tuple[int, ...]:
    shapes = {s for _, s in feeds}
    shown = ", ".join(f"{src!r}: {s}" for src, s in feeds)
    if not spec.pad_dims:
        target = spec.shape if spec.shape is not None else (feeds[0][1] if len(shapes) == 1 else None)
        if target is None:
            last_only = len({len(s) for _, s in feeds}) == 1 and len({s[:-1] for _, s in feeds}) == 1 and feeds[0][1]
            hint = ("pad the last axis explicitly (pad_dims=true, entries flagged in <key>_dim_is_pad) or map the key "
                    "apart" if last_only else "map the key apart: they differ in more than their last axis, which is "
                    "all pad_dims pads")
            raise ValueError(f"mixture key {name!r} is fed with different step shapes ({shown}); {hint}")
        for src, s in feeds:
            if s != tuple(target):
                raise ValueError(f"mixture key {name!r}: source {src!r} has step shape {s}, the key {tuple(target)} "
                                 "(shapes are never truncated or reshaped; pad_dims=true pads a shorter last axis)")
        return tuple(target)
    ranks = {len(s) for _, s in feeds}
    lead = {s[:-1] for _, s in feeds}
    if 0 in ranks or len(ranks) > 1 or len(lead) > 1:
        raise ValueError(f"mixture key {name!r}: pad_dims pads the last axis only; step shapes {shown} differ in "
                         "more than their last axis")
    target = tuple(spec.shape) if spec.shape is not None else next(iter(lead)) + (max(s[-1] for _, s in feeds),)
    for src, s in feeds:
        if len(s) != len(target) or s[:-1] != target[:-1]:
            raise ValueError(f"mixture key {name!r}: source {src!r} has step shape {s}, which pad_dims cannot pad "
                             f"to {target} (the last axis only)")
        if s[-1] > target[-1]:
            raise ValueError(f"mixture key {name!r}: source {src!r} has {s[-1]} entries on the last axis, more than "
                             f"the key's {target[-1]}: never truncated (raise the key's shape)")
    return target


def _check_fill(name: str, fill: Any, dtype: np.dtype) -> None:
    if fill is None:
        return
    if dtype.kind in "OUST":
        if not isinstance(fill, str if dtype.kind != "S" else bytes):
            raise TypeError(f"mixture key {name!r}: fill {fill!r} is not a string for a key of strings")
        return
    try:
        with np.errstate(all="ignore"):
            cast = np.asarray(fill).astype(dtype)
        same = bool(np.all(cast == np.asarray(fill))) or (np.isnan(cast).all() and np.isnan(np.asarray(fill, float)).all())
    except (TypeError, ValueError):
        same = False
    if np.ndim(fill) != 0 or not same:
        raise ValueError(f"mixture key {name!r}: fill {fill!r} is not a value of its dtype {dtype}")


def _renames(source: MixtureSource, info: StoreInfo) -> dict[str, str]:
    """``{store key: mixture key}`` of every kept store key."""
    for what, names in (("the key map", source.keys), ("drop", source.drop)):
        missing = sorted(k for k in names if k not in info.keys)
        if missing:
            raise KeyError(f"source {source.name!r}: {what} names {missing}, not keys of the store "
                           f"(its keys: {sorted(info.keys)})")
    out, seen = {}, {}
    for k in info.keys:
        if k in source.drop:
            continue
        m = source.keys.get(k, k)
        if m in seen:
            raise ValueError(f"source {source.name!r}: store keys {seen[m]!r} and {k!r} both feed mixture key {m!r}")
        seen[m] = k
        out[k] = m
    return out


def resolve(sources: Sequence[MixtureSource], infos: Sequence[StoreInfo], keys: Mapping[str, Any] | Sequence[str] | None,
            delta_timestamps: Mapping[str, Sequence[float]] | None, tolerance_s: float = 1e-4
            ) -> tuple[list[ResolvedKey], list[ResolvedSource]]:
    """The mixture's keys and its sources' reads (see the module docstring for the rules).

    Args:
        sources: the sources, in order.
        infos: what each source's store declares, in the same order.
        keys: ``{mixture key: MixtureKey or mapping or None}``, a list of names (default settings)
            or None (every key a store feeds).
        delta_timestamps: ``{mixture key: [seconds, ...]}`` (already checked by the caller).
        tolerance_s: how far a delta may be from a multiple of ``1 / fps``, seconds.

    Returns:
        ``(keys, sources)``: :class:`ResolvedKey` per mixture key (in the given order, else sorted)
        and :class:`ResolvedSource` per source.

    Raises:
        KeyError: a store without a key that has no fill; a key map naming a key the store lacks; a
            delta_timestamps key that is no mixture key.
        TypeError: incompatible dtypes.  ValueError: incompatible shapes, a clash with a reserved or
            flag name, a source's delta list of another length, fps that cannot give a delta, no fps.
    """
    renames = [_renames(s, i) for s, i in zip(sources, infos)]
    if keys is None:
        names = sorted({m for r in renames for m in r.values()})
        specs = {n: MixtureKey() for n in names}
    elif isinstance(keys, Mapping):
        specs = {str(n): MixtureKey.of(v) for n, v in keys.items()}
    else:
        if isinstance(keys, str):
            raise TypeError(f"keys must be a list of mixture keys or a mapping, not a str ({keys!r})")
        specs = {str(n): MixtureKey() for n in keys}
    if not specs:
        raise ValueError("the mixture has no keys: its stores feed none and none were given")
    for n in specs:
        if n in RESERVED_KEYS or n.endswith(IS_PAD) or n.endswith(DIM_IS_PAD):
            raise ValueError(f"mixture key {n!r} clashes with the keys batches hold ({', '.join(RESERVED_KEYS)}, "
                             f"<key>{IS_PAD}, <key>{DIM_IS_PAD}); rename it in the key map")
    if keys is not None:  # a key the user renamed is one they want: never dropped for not being listed
        for s, r in zip(sources, renames):
            lost = sorted((k, m) for k, m in r.items() if k in s.keys and m not in specs)
            if lost:
                k, m = lost[0]
                raise KeyError(f"source {s.name!r} maps store key {k!r} to {m!r}, which is not among the mixture's keys "
                               f"{sorted(specs)}: add {m!r} to keys (with a fill where a store lacks it) or drop {k!r}")
    deltas = dict(delta_timestamps or {})
    unknown = sorted(set(deltas) - set(specs))
    if unknown:
        raise KeyError(f"delta_timestamps names {unknown}, not keys of the mixture ({sorted(specs)})")
    for s in sources:
        extra = sorted(set(s.delta_timestamps or {}) - set(deltas))
        if extra:
            raise KeyError(f"source {s.name!r}: delta_timestamps for {extra}, which the mixture's delta_timestamps "
                           "do not list (every sample of a key must have the same number of steps)")
        for k, v in (s.delta_timestamps or {}).items():
            if len(v) != len(deltas[k]):
                raise ValueError(f"source {s.name!r}: delta_timestamps[{k!r}] has {len(v)} offsets, the mixture's "
                                 f"{len(deltas[k])} (every sample of a key has the same number of steps)")

    resolved = []
    for name, spec in specs.items():
        store_keys = [next((k for k, m in r.items() if m == name), None) for r in renames]
        feeds = [(s.name, i.keys[k]) for s, i, k in zip(sources, infos, store_keys) if k is not None]
        if spec.fill is None:
            lacking = [s.name for s, k in zip(sources, store_keys) if k is None]
            if lacking:
                raise KeyError(f"source {lacking[0]!r} has no key feeding mixture key {name!r} and the key has no "
                               f"fill rule (give it a fill, map a store key to it, or leave it out)")
        if not feeds:
            if spec.shape is None or spec.dtype is None:
                raise ValueError(f"mixture key {name!r}: no store feeds it; give its shape and dtype")
            dtype, shape = np.dtype(spec.dtype), tuple(spec.shape)
        else:
            dtype = _common_dtype(name, spec, [(src, np.dtype(dt)) for src, (dt, _) in feeds])
            shape = _common_shape(name, spec, [(src, tuple(sh)) for src, (_, sh) in feeds])
            frames = [src for src, (dt, sh) in feeds if is_frames((1,) + tuple(sh), np.dtype(dt))]
            if frames and dtype.kind == "f":
                raise TypeError(f"mixture key {name!r}: source {frames[0]!r} holds camera frames (uint8), which never "
                                f"become a {dtype} key; keep the key uint8 (MixtureDataset(float_images=True) gives "
                                "float32 in [0, 1])")
        _check_fill(name, spec.fill, dtype)
        resolved.append(ResolvedKey(
            name, dtype, shape, len(deltas[name]) if name in deltas else None, spec.fill, bool(spec.pad_dims),
            store_keys, [tuple(i.keys[k][1]) if k is not None else None for i, k in zip(infos, store_keys)],
            [np.dtype(i.keys[k][0]) if k is not None else None for i, k in zip(infos, store_keys)]))
    for rk in resolved:
        for other in (rk.name + IS_PAD, rk.name + DIM_IS_PAD):
            if other in specs:
                raise ValueError(f"mixture key {other!r} clashes with the flags of key {rk.name!r}")

    out_sources = []
    for idx, (s, i, r) in enumerate(zip(sources, infos, renames)):
        read = {k: m for k, m in r.items() if m in specs}
        wanted = {m: (s.delta_timestamps or {}).get(m, deltas[m]) for m in read.values() if m in deltas}
        fps = _fps(s, i) if wanted else (s.fps if s.fps is not None else i.fps)
        steps = {}
        for store_key, m in read.items():
            if m not in wanted:
                continue
            try:
                steps[store_key] = delta_timestamps_to_steps({m: wanted[m]}, fps, tolerance_s)[m]
            except ValueError as exc:
                raise ValueError(f"source {s.name!r} at {fps:g} fps cannot give the offsets of key {m!r}: {exc}") from None
        out_sources.append(ResolvedSource(idx, s.name, read, steps, fps))
    return resolved, out_sources


def _fps(source: MixtureSource, info: StoreInfo) -> float:
    if source.fps is not None:
        if info.fps is not None and abs(float(info.fps) - source.fps) > 1e-9 * source.fps:
            raise ValueError(f"source {source.name!r}: fps={source.fps:g} given, but the store says {info.fps:g}")
        return source.fps
    if info.fps is None:
        raise ValueError(f"source {source.name!r}: delta_timestamps need its fps, and the store has no 'fps' "
                         "attribute; give the source an fps")
    return float(info.fps)
