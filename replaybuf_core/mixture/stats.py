"""Normalisation statistics of a mixture: each store's mergeable summaries (stored ones used, the
others computed: :func:`~replaybuf_core.store.stored_stats.stats_of`) placed into the mixture's key
shapes and pooled or kept per store (:mod:`replaybuf_core.stats.pooling`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from replaybuf_core.stats.pooling import column_map, pooled_result
from replaybuf_core.stats.summaries import FRAMES
from replaybuf_core.store.stored_stats import stats_of

__all__ = ["mixture_stats"]


def _columns(summary, step_shape: tuple[int, ...], target: tuple[int, ...]) -> np.ndarray:
    if summary.kind == FRAMES:
        return np.arange(step_shape[-1], dtype=np.int64)
    return column_map(step_shape, target)


def mixture_stats(mixture: Any, per_source: bool, keys: Sequence[str] | None) -> dict:
    """See :meth:`replaybuf_core.mixture.mixture.Mixture.stats`."""
    by_name = {k.name: k for k in mixture.keys}
    numeric = [k.name for k in mixture.keys if k.dtype.kind in "biuf"]
    if keys is None:
        keys = numeric
    for name in keys:
        if name not in by_name:
            raise KeyError(f"stats: {name!r} is not a key of the mixture ({sorted(by_name)})")
        if name not in numeric:
            raise ValueError(f"stats: mixture key {name!r} holds {by_name[name].dtype} values; statistics are kept "
                             "for numeric and bool keys")
    parts: dict[str, list] = {name: [] for name in keys}
    per: dict[str, dict] = {}
    for s, sampler in enumerate(mixture.samplers):
        wanted = {name: by_name[name].store_keys[s] for name in keys if by_name[name].store_keys[s] is not None}
        summaries = stats_of(sampler.buffer, sorted(set(wanted.values()))) if wanted else {}
        per[mixture.sources[s].name] = {}
        for name, store_key in wanted.items():
            k = by_name[name]
            summary = summaries[store_key]
            part = (summary, _columns(summary, k.source_shapes[s], k.shape))
            parts[name].append((mixture.sources[s].name, part))
            per[mixture.sources[s].name][name] = pooled_result([part], k.shape)
    if per_source:
        return per
    out = {}
    for name in keys:
        if not parts[name]:
            raise ValueError(f"stats: no store feeds mixture key {name!r} (every sample holds its fill)")
        kinds = {p[0].kind for _, p in parts[name]}
        if len(kinds) > 1:
            shown = ", ".join(f"{src!r}: {p[0].kind}" for src, p in parts[name])
            raise ValueError(f"stats: mixture key {name!r} holds camera frames in some stores and other values in "
                             f"others ({shown}); they do not pool")
        out[name] = pooled_result([p for _, p in parts[name]], by_name[name].shape)
    return out

