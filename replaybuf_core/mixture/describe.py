"""What a mixture resolved to, as plain data: its sources (episodes, windows, weights, fps, step
offsets) and keys (dtype, shape, steps, what feeds each from every store, what is filled or padded)
— what ``replaybuf mixture check`` prints."""

from __future__ import annotations

from typing import Any

__all__ = ["describe"]


def _feed(key, s: int) -> str:
    store_key = key.store_keys[s]
    if store_key is None:
        return f"filled with {key.pad_value!r} ({key.name}_is_pad)"
    shape = key.source_shapes[s]
    parts = [store_key if store_key == key.name else f"{store_key} -> {key.name}"]
    if key.pad_dims and shape[-1] < key.shape[-1]:
        parts.append(f"{shape[-1]} of {key.shape[-1]} entries, padded with {key.pad_value!r} ({key.name}_dim_is_pad)")
    if key.source_dtypes[s] != key.dtype and key.dtype.kind != "O":
        parts.append(f"cast from {key.source_dtypes[s]}")
    return ", ".join(parts)


def describe(mixture: Any) -> dict[str, Any]:
    """``{"fingerprint", "samples_per_epoch", "weighted", "seed", "block", "span", "sources": [...],
    "keys": [...], "padded": [...]}``: every source's ``name``, ``location``, ``episodes``, ``windows``,
    ``weight``, ``probability`` (its share of samples), ``fps`` and ``delta_steps``; every key's
    ``name``, ``dtype``, ``shape``, ``steps`` (offsets per sample, None: the anchor only) and ``feeds``
    ``{source: what feeds it}``; and the list of ``"source: key: what"`` that is filled or padded."""
    order = mixture.order
    sources = []
    for i, (s, r, wi) in enumerate(zip(mixture.sources, mixture.resolved, mixture.window_indexes)):
        sources.append({"name": s.name, "location": s.location_text, "episodes": mixture.n_episodes[i],
                        "windows": len(wi), "weight": s.weight, "probability": float(order.probabilities[i]),
                        "fps": r.fps, "delta_steps": {r.renames[k]: v.tolist() for k, v in r.delta_steps.items()}})
    keys, padded = [], []
    for k in mixture.keys:
        feeds = {s.name: _feed(k, i) for i, s in enumerate(mixture.sources)}
        keys.append({"name": k.name, "dtype": str(k.dtype), "shape": list(k.shape), "steps": k.n_steps,
                     "feeds": feeds})
        for i, s in enumerate(mixture.sources):
            if k.store_keys[i] is None or (k.pad_dims and k.source_shapes[i][-1] < k.shape[-1]):
                padded.append(f"{s.name}: {k.name}: {feeds[s.name]}")
    return {"fingerprint": mixture.fingerprint, "samples_per_epoch": len(mixture), "weighted": order.weighted,
            "seed": order.seed, "block": order.block, "span": order.span, "sources": sources, "keys": keys,
            "padded": padded}
