"""``replaybuf info`` as a function: a JSON-able summary of a replay buffer (any backend)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from replaybuf_core.layout.codec_names import describe_codec
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS, CAP_SHARDS
from replaybuf_core.store.buffer import ReplayBuffer

from .verify import import_incomplete


def open_read_only(path_or_buffer: Any) -> ReplayBuffer:
    """A :class:`ReplayBuffer` as is, or the store at a path opened with ``create_from_path`` (read-only,
    nothing on disk changes).  Raises FileNotFoundError / CorruptStoreError (ValueError)."""
    if isinstance(path_or_buffer, ReplayBuffer):
        return path_or_buffer
    rb = ReplayBuffer.create_from_path(path_or_buffer)
    if hasattr(rb.store, "cache_bytes"):  # one pass over each array: a chunk cache only costs memory
        rb.store.cache_bytes = 0
    return rb


def buffer_info(path_or_buffer: Any) -> dict[str, Any]:
    """Summary of a buffer: a dict of JSON types.

    Keys: ``path`` (str or None), ``backend``, ``n_episodes``, ``n_steps``, ``episode_length``
    (``{"min", "median", "max"}`` in steps, None when empty), ``data`` (key → ``{"shape", "dtype",
    "chunks", "shards", "codec", "nbytes", "stored_bytes", "compression_ratio"}``; ``nbytes`` is the
    decoded size in bytes, ``stored_bytes`` what the backend stores (None when it cannot tell, through
    the optional ``stored_bytes`` protocol method), ``compression_ratio`` = nbytes / stored_bytes),
    ``meta`` (key → ``{"shape", "dtype"}``), ``attrs`` (the ``data`` group attributes) and
    ``total_nbytes`` / ``total_stored_bytes``.

    Raises:
        FileNotFoundError: nothing at the path.  CorruptStoreError (ValueError): not a valid buffer
            (``replaybuf verify`` names every problem).
    """
    rb = open_read_only(path_or_buffer)
    s = rb.store
    caps = s.capabilities
    lengths = rb.episode_lengths
    sizer = getattr(s, "stored_bytes", None)
    data = {}
    for key in rb.keys():
        shape = (rb.n_steps,) + tuple(s.shape("data", key)[1:])
        dtype = np.dtype(s.dtype("data", key))
        nbytes = int(np.prod(shape, dtype=np.int64)) * (dtype.itemsize if dtype != object else 0) or None
        stored = sizer("data", key) if callable(sizer) else None
        data[key] = {
            "shape": list(shape),
            "dtype": str(dtype),
            "chunks": list(s.chunks("data", key)) if CAP_CHUNKS in caps else None,
            "shards": (list(s.shards("data", key)) if CAP_SHARDS in caps and s.shards("data", key) else None),
            "codec": describe_codec(s.codec("data", key)) if CAP_CODECS in caps else None,
            "nbytes": nbytes,
            "stored_bytes": stored,
            "compression_ratio": round(nbytes / stored, 3) if nbytes and stored else None,
        }
    meta = {k: {"shape": list(s.shape("meta", k)), "dtype": str(np.dtype(s.dtype("meta", k)))}
            for k in s.list_arrays("meta")}
    total_n = sum(v["nbytes"] or 0 for v in data.values())
    stored_all = [v["stored_bytes"] for v in data.values()]
    path = None if isinstance(path_or_buffer, ReplayBuffer) else os.fspath(path_or_buffer)
    return {
        "path": path,
        "backend": rb.backend,
        "n_episodes": rb.n_episodes,
        "n_steps": rb.n_steps,
        "episode_length": ({"min": int(lengths.min()), "median": float(np.median(lengths)),
                            "max": int(lengths.max())} if lengths.size else None),
        "data": data,
        "meta": meta,
        "attrs": jsonable(s.get_attrs("data")),
        "total_nbytes": total_n,
        "total_stored_bytes": sum(stored_all) if stored_all and None not in stored_all else None,
    }


def jsonable(x: Any) -> Any:
    """``x`` in JSON types: dicts (str keys), lists (from tuples and arrays), NumPy scalars as Python
    ones, NaN and infinities as None (JSON has neither), anything else as its ``repr``."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return repr(x)


def format_info(info: dict[str, Any]) -> str:
    """The text ``replaybuf info`` prints for a :func:`buffer_info` dict."""
    out = [f"{info['path'] or '<buffer>'}  (backend {info['backend']})",
           f"episodes: {info['n_episodes']}   steps: {info['n_steps']}"]
    if import_incomplete(info["attrs"]):
        out.append("import: INCOMPLETE (import.complete is false): the import stopped after these episodes; "
                   "delete the store and import again")
    el = info["episode_length"]
    if el:
        out.append(f"episode length: min {el['min']}, median {el['median']:g}, max {el['max']}")
    out.append("data:")
    w = max([12] + [len(k) for k in info["data"]])
    out.append(f"  {'key':<{w}} {'shape':<20} {'dtype':<8} {'chunks':<18} {'shards':<18} {'stored':>12} "
               f"{'ratio':>7}  codec")
    for key, d in info["data"].items():
        stored = f"{d['stored_bytes']:,}" if d["stored_bytes"] is not None else "?"
        ratio = f"{d['compression_ratio']:.2f}x" if d["compression_ratio"] else "-"
        out.append(f"  {key:<{w}} {str(tuple(d['shape'])):<20} {d['dtype']:<8} "
                   f"{str(tuple(d['chunks'])) if d['chunks'] else '-':<18} "
                   f"{str(tuple(d['shards'])) if d['shards'] else '-':<18} {stored:>12} {ratio:>7}  {d['codec']}")
    if info["total_stored_bytes"]:
        out.append(f"  total: {info['total_nbytes']:,} bytes decoded, {info['total_stored_bytes']:,} stored "
                   f"({info['total_nbytes'] / info['total_stored_bytes']:.2f}x)")
    out.append("meta: " + ", ".join(f"{k} {tuple(v['shape'])} {v['dtype']}" for k, v in info["meta"].items()))
    conv = info["attrs"].get("conversions") if isinstance(info["attrs"], dict) else None
    if conv:
        out.append("conversions: " + ", ".join(f"{k}: {v.get('source_dtype')} -> {v.get('converted_to')}"
                                               for k, v in conv.items()))
    return "\n".join(out)
