"""Setting up an import's destination: a new store's arrays, meta and attributes
(:func:`set_up`), or a stopped run's build continued (:func:`continue_build`, see
:mod:`~replaybuf_core.importing.resume`); the source's meta arrays (:func:`meta_arrays`)."""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.layout.codec_names import describe_codec
from replaybuf_core.source import Source
from replaybuf_core.store.buffer import ReplayBuffer

from .check import same_bits
from .plan import KeyPlan, native, plan_key
from .resume import Progress, read_progress

logger = logging.getLogger(__name__)

__all__ = ["set_up", "continue_build", "meta_arrays", "image_frames_per_shard", "no_cache", "jsonable",
           "SHARD_RAW_BYTES", "SOURCE_EPISODE_INDEX", "EPISODE_ATTRS"]

#: Raw bytes of the frames in one shard at most: large frames get fewer frames per shard, so that a
#: shard staged for writing (and its source values kept for the check) stays this small.
SHARD_RAW_BYTES = 16 * 2**20
SOURCE_EPISODE_INDEX = "source_episode_index"
EPISODE_ATTRS = "episode_attrs"


def jsonable(x: Any) -> Any:
    """``x`` as JSON can hold it: NumPy arrays and scalars as lists and numbers, non-finite floats as text."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


def no_cache(store: Any) -> None:
    """Every chunk is read once, in order: a cache of decoded chunks would only cost memory."""
    if hasattr(store, "cache_bytes"):
        store.cache_bytes = 0


def image_frames_per_shard(spec_shape: tuple[int, ...], requested: int | None) -> int | None:
    """Frames a shard for frames of ``spec_shape`` (H, W, C): ``requested``, fewer for large frames (at
    most :data:`SHARD_RAW_BYTES` of raw pixels a shard); None stays None (no shards)."""
    if requested is None:
        return None
    frame_bytes = int(np.prod(spec_shape))
    return max(1, min(requested, SHARD_RAW_BYTES // max(1, frame_bytes)))



def _plans(source: Source, dst: Any, keys: list[str], n_steps: int, kept: dict[str, str],
           settings: dict) -> dict[str, KeyPlan]:
    return {k: plan_key(k, source.keys[k], n_steps, dst, settings["keep_dtype"], settings["frames"].get(k),
                        image_frames_per_shard(source.keys[k].shape, settings["frames_per_shard"]), kept)
            for k in keys}


def set_up(source: Source, dst: Any, keys: list[str], indices: list[int], n_steps: int, kept: dict[str, str],
            settings: dict, provenance: dict[str, Any]) -> tuple[ReplayBuffer, dict[str, KeyPlan]]:
    """Create the arrays, meta and attributes of a new destination; returns the buffer on it and the
    plan of each key."""
    no_cache(dst)
    passed = [k for k, c in settings["frames"].items() if c.passthrough]
    if passed and getattr(dst, "image_codec", None) is None:
        raise ValueError(f"video passthrough ({', '.join(passed)}): this backend ({type(dst).__name__}) has no video "
                         "frame codec to hold the source's packets (the zarr backend's); import with video reencode")
    lossy = [f"{k}={c}" for k, c in settings["frames"].items() if not c.lossless]
    if lossy and getattr(dst, "image_codec", None) is None:
        raise ValueError(f"frames / lossy_quality: this backend ({type(dst).__name__}) has no image codec and "
                         f"stores frames exactly; {', '.join(lossy)} is lossy (frame codecs are the zarr backend's)")
    # first: a store built in place (object storage) reads as an empty buffer from here on
    ReplayBuffer._ensure_episode_ends(dst)
    plans = _plans(source, dst, keys, n_steps, kept, settings)
    for key, p in plans.items():
        dst.create_array("data", key, shape=(0,) + p.shape[1:], dtype=p.dtype, chunks=p.chunks,
                         codec=p.codec, shards=p.shards, fill_value=None if p.dtype == object else 0)
    whole, per_episode = meta_arrays(source, indices)
    for name, values in whole.items():
        _write_meta(dst, name, values)
    for name, values in per_episode.items():  # rows come with the commits (_stage_episode_meta below)
        _write_meta(dst, name, values, rows=0)
    conversions = {
        p.key: {"source_dtype": str(p.src_dtype) if p.src_dtype.isnative else p.src_dtype.str,
                "converted_to": str(p.dtype), "codec": describe_codec(p.codec)}
        for p in plans.values() if p.converted or p.dtype != p.src_dtype
    }
    dst.set_attrs("data", jsonable({
        "conversions": conversions,
        "import": {**provenance, "kept_dtype": dict(kept)},
        "fps": source.fps,
        "source_attrs": source.attrs,
        "key_attrs": {k: dict(source.keys[k].attrs) for k in keys if source.keys[k].attrs},
    }))
    rb = ReplayBuffer(dst)
    rb._stage_episode_meta(per_episode)  # each commit writes its episodes' rows: a killed import's meta is its own
    # The final length is known: size every data array once.  The rows stay uncommitted until the
    # writer commits their episodes; a crash leaves rows past episode_ends that the next open trims.
    for key in keys:
        dst.resize("data", key, n_steps)
    return rb, plans



def meta_arrays(source: Source, indices: list[int]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The source's meta arrays: ``(whole, per_episode)`` — those written at once, and those with one
    row per imported episode (the source's ``episode_meta``, ``source_episode_index``,
    ``episode_attrs``), which grow with the commits."""
    whole = dict(source.meta_arrays())
    per_episode: dict[str, np.ndarray] = {}
    for name, values in source.episode_meta(indices).items():
        if name in whole:
            raise ValueError(f"{source.format_name} source: meta array {name!r} is given twice")
        if len(values) != len(indices):
            raise ValueError(f"{source.format_name} source: meta array {name!r} has {len(values)} rows for "
                             f"{len(indices)} episodes")
        per_episode[name] = values
    for reserved in ("episode_ends", SOURCE_EPISODE_INDEX, EPISODE_ATTRS):
        if reserved in whole or reserved in per_episode:
            raise ValueError(f"{source.format_name} source: meta array name {reserved!r} is the import's own")
    for out in (whole, per_episode):
        for name, values in out.items():  # native byte order, as data keys (the same values)
            values = np.asarray(values)
            if not values.dtype.isnative:
                out[name] = values.astype(native(values.dtype))
    per_episode[SOURCE_EPISODE_INDEX] = np.asarray([source.episode_id(i) for i in indices], dtype=np.int64)
    attrs = [source.episode_attrs(i) for i in indices]
    if any(attrs):
        per_episode[EPISODE_ATTRS] = np.array([json.dumps(jsonable(a), sort_keys=True) for a in attrs], dtype=object)
    return whole, per_episode


def _write_meta(dst: Any, name: str, values: np.ndarray, rows: int | None = None) -> None:
    """Create ``meta/<name>`` chunked for all of ``values`` and write them — or, with ``rows``, create
    it with that many rows and write nothing (rows that come with the commits)."""
    from replaybuf_core.layout.chunks import get_optimal_chunks
    from replaybuf_core.layout.compressors import resolve_compressor

    values = np.asarray(values)
    if values.ndim == 0:
        values = values.reshape(1)
    obj = values.dtype == object
    dst.create_array("meta", name, shape=values.shape if rows is None else (rows,) + values.shape[1:],
                     dtype=values.dtype,
                     chunks=get_optimal_chunks((max(1, len(values)),) + values.shape[1:], values.dtype),
                     codec=None if obj else resolve_compressor("default"), fill_value=None if obj else 0)
    if rows is None and len(values):
        dst.write("meta", name, 0, values)



def continue_build(source: Source, entry: Any, path: Path, keys: list[str], indices: list[int], n_steps: int,
                   kept: dict[str, str], settings: dict, plan: str | None, options: dict
                   ) -> tuple[ReplayBuffer | None, dict[str, KeyPlan] | None, Progress | None]:
    """Open a stopped run's build at ``path`` to continue it: ``(buffer, plans, its progress)`` with
    its committed episodes kept (rows past them are trimmed by the open and written again), or
    ``(None, None, None)`` — logged — when it does not fit this import's plan after all (its arrays
    are not the plan's, its committed episodes not the first chosen, it does not open)."""
    found = read_progress(path)
    dst = rb = None
    try:
        dst = entry.open(os.fspath(path), read_only=False, **options)
        no_cache(dst)
        plans = _plans(source, dst, keys, n_steps, kept, settings)
        why = _differs(dst, plans, found, plan)
        if why is None:
            with warnings.catch_warnings():  # (the recovery says so: expected here)
                warnings.filterwarnings("ignore", r".*\(an interrupted append\)", RuntimeWarning)
                rb = ReplayBuffer(dst)  # trims what the stopped run wrote past its committed episodes
            why = _committed_differs(source, rb, indices, found)
        if why is None:
            _, per_episode = meta_arrays(source, indices)
            rb._stage_episode_meta({name: v[rb.n_episodes:] for name, v in per_episode.items()})
            for key in keys:
                dst.resize("data", key, n_steps)
            return rb, plans, found
    except Exception as exc:  # noqa: BLE001 - whatever does not open or read as expected is built anew
        why = f"it does not open as expected ({type(exc).__name__}: {exc})"
    except BaseException:
        _close(rb, dst)
        raise
    logger.warning("%s: not continued: %s; starting over", path, why)
    _close(rb, dst)
    return None, None, None


def _close(rb: ReplayBuffer | None, dst: Any) -> None:
    if rb is not None:
        rb.close()
    elif dst is not None:
        dst.close()


def _differs(dst: Any, plans: dict[str, KeyPlan], found: Any, plan: str | None) -> str | None:
    """Why the store ``dst`` cannot be continued with ``plans`` (None when it can)."""
    if found is None or plan is None or found.plan != plan:
        return "its progress file is gone or names another plan"
    if sorted(dst.list_arrays("data")) != sorted(plans):
        return f"its data keys {sorted(dst.list_arrays('data'))} are not the plan's {sorted(plans)}"
    for key, p in plans.items():
        shards = dst.shards("data", key)
        got = (np.dtype(dst.dtype("data", key)), tuple(dst.chunks("data", key) or ()),
               None if shards is None else tuple(shards), describe_codec(dst.codec("data", key)))
        want = (p.dtype, tuple(p.chunks), None if p.shards is None else tuple(p.shards),
                got[3] if p.codec is None else describe_codec(p.codec))  # None: the backend's own choice
        if got != want:
            return f"data/{key} is stored as {got}, the plan is {want}"
    return None


def _committed_differs(source: Source, rb: ReplayBuffer, indices: list[int], found: Any) -> str | None:
    """Why the committed episodes of ``rb`` are not the first ones of this import (None when they are)."""
    n = rb.n_episodes
    want = np.cumsum(np.asarray(source.episode_lengths, dtype=np.int64)[indices])
    if n > len(want) or not np.array_equal(rb.episode_ends, want[:n]):
        return f"its {n} committed episodes do not have the lengths of the first {n} chosen"
    if found.episodes < n:
        return f"its progress covers {found.episodes} episodes of the {n} committed"
    _, per_episode = meta_arrays(source, indices)
    for name, values in per_episode.items():
        if not rb.store.has_array("meta", name) or rb.store.shape("meta", name)[0] != n:
            return f"meta/{name} does not hold one row per committed episode"
        if n and not same_bits(np.asarray(values[:n]), rb.store.read("meta", name, 0, n)):
            return f"meta/{name} differs from the source's"
    return None
