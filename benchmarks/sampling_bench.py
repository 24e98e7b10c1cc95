"""Sampling random training windows: replaybuf vs naive zarr slicing vs the decode floor vs NumPy.

Windows: sequence_length 16, pad_before 1, pad_after 7, images through ``key_first_k={img: 2}``,
batches of 64 drawn uniformly.  *Decode floor*: decoding exactly the chunks those windows touch with
the frame codec's own imagecodecs call (``decode_image``: e.g. ``jpegxl_decode``, or ``webp_decode``
with ``hasalpha=False`` for RGB, the fastest call) / Blosc directly, single-threaded, their bytes
already in memory; each batch's floor is timed right
after replaybuf's cold read of the same batch, three passes over 20 batches, medians.  *Cold*: the LRU of
decoded chunks is emptied before every batch (the OS page cache stays warm).  *Warm*: a cache larger
than the data set, second pass over the same batches.
"""

from __future__ import annotations

from pathlib import Path

import numcodecs
import numpy as np
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_zarr.codecs import FrameCodec

from .common import Table, median_time

SEQ, PAD_BEFORE, PAD_AFTER, BATCH = 16, 1, 7, 64


def _sampler(rb: ReplayBuffer, image_key: str) -> SequenceSampler:
    # frames as stored (uint8), as the floors and the in-memory copy read them
    return SequenceSampler(rb, SEQ, pad_before=PAD_BEFORE, pad_after=PAD_AFTER, key_first_k={image_key: 2},
                           dtypes="stored")


def _touched_chunks(rb: ReplayBuffer, sampler: SequenceSampler, batch: np.ndarray) -> dict[str, set]:
    """Chunk coordinates (time axis) each key's windows touch."""
    rows = sampler.indices[batch]
    out = {}
    for key in sampler.keys:
        c0 = rb.store.chunks("data", key)[0]
        k = sampler.key_first_k.get(key)
        need = sampler._rows_to_read(key, rows) if k is not None else rows[:, 1] - rows[:, 0]
        out[key] = {t for a, n in zip(rows[:, 0], need) if n > 0 for t in range(a // c0, (a + n - 1) // c0 + 1)}
    return out


def _floor_payloads(rb: ReplayBuffer, sampler: SequenceSampler, batches: list[np.ndarray]) -> list:
    """Per batch: the stored bytes of every chunk its windows touch (read once, kept in memory)."""
    payloads = []
    codecs = rb.get_compressors()
    for b in batches:
        items = []
        for key, times in _touched_chunks(rb, sampler, b).items():
            reader = rb.store._reader("data", key)
            dtype, shape = reader.dtype, reader.chunk_shape
            frames = codecs[key] if isinstance(codecs[key], FrameCodec) else None
            channels = shape[3] if len(shape) == 4 else 1
            for t in sorted(times):
                raw = reader._raw_chunk((t,) + (0,) * (len(shape) - 1))
                if raw is not None:
                    items.append((frames, channels, raw, dtype, shape))
        payloads.append(items)
    return payloads


def _decode(items: list) -> None:
    """The decode floor of one batch: its touched chunks decoded directly, on this thread."""
    for frames, channels, raw, dtype, shape in items:
        if frames is not None:
            frames.decode_image(raw, channels)
        else:
            np.frombuffer(numcodecs.blosc.decompress(raw), dtype=dtype).reshape(shape)


def run(table: Table, store_path: Path, smoke: bool, image_key: str = "img") -> None:
    n_batches = 5 if smoke else 20
    rb = ReplayBuffer.create_from_path(store_path)
    sampler = _sampler(rb, image_key)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(sampler), BATCH) for _ in range(n_batches)]

    def per_batch(fn) -> float:
        return float(np.median([median_time(lambda b=b: fn(b), 1) for b in batches]))

    # replaybuf cold (the decoded-chunk LRU emptied before every batch) and the decode floor of the
    # same batch, timed one right after the other: the machine's speed drifts, their ratio does not
    def cold(b):
        rb.store.cache.clear()
        sampler.sample_batch(b)
    sampler.sample_batch(batches[0])  # open descriptors, shard indexes
    payloads = _floor_payloads(rb, sampler, batches)
    cold_times, floor_times = [], []
    for _ in range(1 if smoke else 3):
        for b, items in zip(batches, payloads):
            cold_times.append(median_time(lambda b=b: cold(b), 1))
            floor_times.append(median_time(lambda it=items: _decode(it), 1))
    t_cold, t_floor = float(np.median(cold_times)), float(np.median(floor_times))

    # replaybuf, warm: a cache larger than the data set, second pass
    rb.cache_bytes = 8 * 2**30
    for b in batches:
        sampler.sample_batch(b)
    t_warm = per_batch(sampler.sample_batch)

    # naive zarr-python slicing: one call per window per key
    g = zarr.open_group(store_path, mode="r")
    arrays = {k: g["data"][k] for k in sampler.keys}

    def naive(b):
        for i in b:
            bs, be, _, _ = sampler.indices[i]
            for key, arr in arrays.items():
                arr[bs: bs + 2] if key == image_key else arr[bs:be]
    naive_batches = batches[:2] if not smoke else batches[:1]
    t_naive = float(np.median([median_time(lambda b=b: naive(b), 1) for b in naive_batches]))

    # in-memory NumPy copy
    mem = ReplayBuffer.copy_from_path(store_path)
    mem_sampler = _sampler(mem, image_key)
    t_numpy = per_batch(mem_sampler.sample_batch)

    for b in batches[:2]:  # same windows from both
        x, y = sampler.sample_batch(b), mem_sampler.sample_batch(b)
        assert all(np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f") for k in x)

    ms = 1e3
    table.add("sampling", "replaybuf cold cache (per batch of 64)", t_cold * ms, "ms")
    table.add("sampling", "replaybuf warm cache", t_warm * ms, "ms")
    table.add("sampling", "naive zarr-python slicing", t_naive * ms, "ms")
    table.add("sampling", "decode floor (touched chunks, 1 thread)", t_floor * ms, "ms")
    table.add("sampling", "in-memory NumPy buffer", t_numpy * ms, "ms")
    r1 = t_floor / t_cold
    table.ratio("sampling", "cold: decode floor / replaybuf", r1, ">= 0.5", r1 >= 0.5)
    r2 = t_naive / t_cold
    table.ratio("sampling", "cold: speed-up over naive zarr", r2, ">= 10", r2 >= 10)
    r3 = t_warm / t_numpy
    table.ratio("sampling", "warm: replaybuf / NumPy time", r3, "<= 3", r3 <= 3)
