"""Ingest: importing a diffusion-policy store vs the encode floor vs a naive per-episode writer.

*Encode floor*: encoding every frame (uint8) with the store's own frame codec (``encode_frame``: the
imagecodecs call and, for JPEG XL, its exactness check) on a thread pool of the same size as replaybuf's codec pool (one thread per CPU) — nothing else (no source
decoding, no checking, no writing).  *Naive*: zarr-python ``resize`` + slice-assign per episode into arrays with the same
chunks, shards and codecs, timed on the first episodes and scaled per frame.  Peak RSS is that of the
import run in a subprocess.  The full run alternates three imports with three floors (medians; peak RSS:
the largest).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_zarr.codecs import FrameCodec

from .common import Table, dir_bytes

# Peak RSS from VmHWM (this process's own memory): Linux's ru_maxrss keeps the peak of the forking
# parent across exec, and the parent holds every decoded frame while timing the encode floor.
_CHILD = """
import json, sys, time
from replaybuf_core.formats.diffusion_policy import import_diffusion_policy
t = time.perf_counter()
report = import_diffusion_policy(sys.argv[1], sys.argv[2], progress=False, overwrite=True)
dt = time.perf_counter() - t
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": dt, "ok": report.ok, "maxrss_kb": hwm}))
"""


def import_in_subprocess(src: Path, dst: Path) -> dict:
    """Run the import in a fresh interpreter; returns seconds, ok and peak RSS (KiB)."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(dst)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _image_key(rb: ReplayBuffer) -> str:
    return next(k for k in rb.keys() if len(rb.store.shape("data", k)) == 4)


def encode_floor(src: Path, dst: Path, n_frames: int) -> float:
    """Seconds to encode ``n_frames`` frames (read from the imported store) with the store's frame
    codec on a thread pool of replaybuf's codec-pool size (one thread per CPU)."""
    rb = ReplayBuffer.create_from_path(dst)
    key = _image_key(rb)
    codec = rb.get_compressors()[key]
    assert isinstance(codec, FrameCodec), codec
    frames = rb.read_ranges(key, [0], [n_frames])[0]
    workers = os.cpu_count() or 1
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda f: codec.encode_frame(f[None]), frames, chunksize=64))
    return time.perf_counter() - t


def naive_per_frame(src: Path, dst: Path, n_episodes: int) -> float:
    """Seconds per frame of a resize-and-write-per-episode loop with the destination's layout."""
    rb = ReplayBuffer.create_from_path(dst)
    src_rb = ReplayBuffer.create_from_path(src)
    key = _image_key(rb)
    with tempfile.TemporaryDirectory() as tmp:
        g = zarr.open_group(Path(tmp) / "naive.zarr", mode="w")
        arrays = {}
        for k in rb.keys():
            a = rb.data[k]  # the zarr array itself: its stored dtype, chunks and codecs
            arrays[k] = g.create_array(k, shape=(0,) + a.shape[1:], chunks=a.chunks, shards=a.shards,
                                       dtype=a.dtype, serializer=a.serializer, compressors=a.compressors)
        n = 0
        t = time.perf_counter()
        for i in range(n_episodes):
            ep = src_rb.get_episode(i)
            for k, arr in arrays.items():
                v = ep[k].astype(arr.dtype)
                arr.resize((n + len(v),) + arr.shape[1:])
                arr[n:] = v
            n += len(ep[key])
        return (time.perf_counter() - t) / n


def run(table: Table, src: Path, dst: Path, smoke: bool) -> float:
    """Import ``src`` into ``dst`` (the store later sections read); returns the import's seconds."""
    # import and encode floor alternate (three of each in the full run): the machine's speed
    # drifts over seconds, so each is the median of runs taken side by side
    imports, floors = [], []
    for _ in range(1 if smoke else 3):
        imports.append(import_in_subprocess(src, dst))
        rb = ReplayBuffer.create_from_path(dst)
        n_frames = rb.n_steps
        floors.append(encode_floor(src, dst, n_frames))
    res = {"ok": all(r["ok"] for r in imports), "maxrss_kb": max(r["maxrss_kb"] for r in imports)}
    t_import = statistics.median(r["seconds"] for r in imports)
    t_floor = statistics.median(floors)
    t_naive = naive_per_frame(src, dst, 3 if smoke else 20) * n_frames
    rss_mb = res["maxrss_kb"] / 1024
    table.add("ingest", f"replaybuf import ({n_frames} frames, verified)", t_import, "s")
    table.add("ingest", "encode floor (frames only, thread pool)", t_floor, "s")
    table.add("ingest", "naive resize+write per episode (scaled)", t_naive, "s")
    table.add("ingest", "import peak RSS", rss_mb, "MB", "{:.0f}")
    r = t_floor / t_import
    table.ratio("ingest", "encode floor / import time", r, ">= 0.7", r >= 0.7)
    table.ratio("ingest", "import peak RSS (MB)", rss_mb, "< 500", rss_mb < 500)
    table.ratio("ingest", "speed-up over naive writer", t_naive / t_import, "> 1", t_naive > t_import)
    if not res["ok"]:
        raise RuntimeError("the benchmark import failed its verification")
    return t_import


def disk(table: Table, src: Path, dst: Path) -> None:
    s, d = dir_bytes(src), dir_bytes(dst)
    table.add("disk", "source store", s / 2**20, "MiB")
    table.add("disk", "imported store", d / 2**20, "MiB")
    table.ratio("disk", "imported / source bytes", d / s, "<= 0.5", d / s <= 0.5)
