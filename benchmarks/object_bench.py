"""Object storage against a local S3 server (moto's ``ThreadedMotoServer`` on 127.0.0.1, an
ephemeral port; configured through the AWS_* variables only).

* Importing Push-T (diffusion-policy) straight into S3 vs to local disk, side by side.
* Copying the imported Push-T store to S3 vs to local disk (``save_to_path``).
* Sampling batches of 64 windows (2 frames, 2 states, 16 actions per sample) from the store on S3:
  replaybuf's ``WindowSampler.sample_batch`` (no LRU of decoded chunks; shard indexes cached) vs
  zarr-python's own ``ObjectStore`` slicing of the same windows (``array[a:b]`` per window and key).
* Requests per batch for the camera key (shard indexes already read) against the distinct shards its
  windows touch: inner chunks of one shard closer than ``COALESCE_GAP`` (1 MiB, obstore's own
  coalescing default) share one range request.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import statistics
import time
import urllib.request
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.frames import frame_keys
from replaybuf_core.sampling.window_sampler import WindowSampler

from .common import Table, median_time

BATCH = 64


@contextlib.contextmanager
def local_s3(bucket: str = "bench"):
    """moto's ``ThreadedMotoServer`` on 127.0.0.1 (an ephemeral port) with ``bucket`` made, the AWS_*
    variables pointing at it while inside (restored after); yields ``(host, port)``."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    keys = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP")
    saved = {k: os.environ.get(k) for k in keys}
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="bench",
                          AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true")
        urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/{bucket}", method="PUT")).read()
        yield host, port
    finally:
        from replaybuf_zarr.lease import release_all_leases

        release_all_leases()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run(table: Table, store: Path, tmp: Path, smoke: bool, src: Path | None = None) -> None:
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("obstore") is None:
        table.add("object storage", "skipped: moto[server] / obstore not installed (the test extra)", 0, "-")
        return
    with local_s3():
        if src is not None:
            _imports(table, src, tmp)
        _run(table, store, tmp, smoke)


def _imports(table: Table, src: Path, tmp: Path) -> None:
    """The diffusion-policy import of ``src`` straight into the bucket vs to local disk, side by side."""
    from replaybuf_core.importing import import_dataset

    t0 = time.perf_counter()
    local = import_dataset(src, tmp / "object-bench-import.zarr", "diffusion-policy", progress=False, overwrite=True)
    t_local = time.perf_counter() - t0
    t0 = time.perf_counter()
    remote = import_dataset(src, "s3://bench/imported.zarr", "diffusion-policy", progress=False)
    t_s3 = time.perf_counter() - t0
    if not (local.ok and remote.ok):
        raise RuntimeError("a benchmark import failed its verification")
    table.add("object storage", "import to local disk (verified)", t_local, "s", "{:.1f}")
    table.add("object storage", "import straight into S3 (verified, local server)", t_s3, "s", "{:.1f}")
    table.ratio("object storage", "import to S3 / import to local disk", t_s3 / t_local, "(informational)", True)


def _run(table: Table, store: Path, tmp: Path, smoke: bool) -> None:
    import zarr

    url = "s3://bench/pusht.zarr"
    with ReplayBuffer.create_from_path(store) as src:
        t0 = time.perf_counter()
        src.save_to_path(tmp / "object-bench-local.zarr")
        t_local = time.perf_counter() - t0
        t0 = time.perf_counter()
        src.save_to_path(url)
        t_s3 = time.perf_counter() - t0
    table.add("object storage", "copy the imported store to local disk (save_to_path)", t_local, "s", "{:.2f}")
    table.add("object storage", "copy the imported store to S3 (save_to_path, local server)", t_s3, "s", "{:.2f}")
    table.ratio("object storage", "copy to S3 / copy to local disk", t_s3 / t_local, "(informational)", True)

    rb = ReplayBuffer.create_from_path(url)
    rb.cache_bytes = 0
    img = frame_keys(rb)[0]
    deltas = {img: [-1, 0], "state": [-1, 0], "action": list(range(-1, 15))}
    deltas = {k: v for k, v in deltas.items() if k in rb.keys()}
    sampler = WindowSampler(rb, deltas, dtypes="stored")  # frames as stored, as zarr-python's slicing reads them
    rng = np.random.default_rng(0)
    n_batches = 2 if smoke else 10
    batches = [rng.integers(0, len(sampler), BATCH) for _ in range(n_batches + 1)]
    per_shard = rb.store.shards("data", img)[0]
    starts = list(range(0, rb.n_steps, per_shard))
    rb.read_ranges(img, starts, [a + 1 for a in starts])  # every shard index read once, as a training run does
    sampler.sample_batch(batches[0])
    fetcher = rb.store._reader("data", img)._fetch.objects
    times, requests, shards = [], [], []
    for b in batches[1:]:
        before = fetcher.requests
        times.append(median_time(lambda: sampler.sample_batch(b), 1))
        requests.append(fetcher.requests - before)
        shards.append(len({r // per_shard for r in _rows(sampler, b, deltas[img])}))
    t_ours = statistics.median(times)

    group = zarr.open_group(zarr.storage.ObjectStore(rb.store.root.store.store, read_only=True), mode="r")
    arrays = {k: group["data"][k] for k in deltas}

    def zarr_batch(b):
        for k, offsets in deltas.items():
            for r in _rows(sampler, b, offsets):
                arrays[k][r:r + 1]

    t_zarr = statistics.median(median_time(lambda: zarr_batch(b), 1) for b in batches[1:3])
    table.add("object storage", f"sample_batch({BATCH}) from S3, replaybuf (no decoded-chunk LRU)", BATCH / t_ours,
              "samples/s", "{:.0f}")
    table.add("object storage", "the same windows, zarr-python ObjectStore slicing", BATCH / t_zarr, "samples/s", "{:.0f}")
    table.ratio("object storage", "replaybuf / zarr-python on S3", t_zarr / t_ours, ">= 10", t_zarr / t_ours >= 10)
    table.add("object storage", f"requests per batch for {img} (median)", statistics.median(requests), "requests", "{:.0f}")
    table.add("object storage", f"distinct {img} shards a batch touches (median)", statistics.median(shards), "shards", "{:.0f}")
    table.ratio("object storage", "requests / distinct shards", statistics.median(requests) / statistics.median(shards),
                "= 1", statistics.median(requests) <= statistics.median(shards))
    rb.close()


def _rows(sampler: WindowSampler, b: np.ndarray, offsets) -> list[int]:
    """The buffer rows the windows of batch ``b`` read at ``offsets`` (clamped to each episode, as
    LeRobot's rule does)."""
    where = sampler.locate(b)
    ends = np.asarray(sampler.buffer.episode_ends[:], dtype=np.int64)
    first = np.r_[0, ends[:-1]]
    e = where["episode_index"]
    return [int(min(max(a + d, s), z - 1)) for a, s, z in zip(where["index"], first[e], ends[e]) for d in offsets]
