"""Entry point: ``python -m benchmarks [--smoke]`` — one table of medians and ratios from one run.

Sections: sampling, training throughput, diffusion_policy's dataset code on our store, in-place edits, export, statistics, ingest, imports on Dask, object
storage, step→episode index, bytes on disk, LeRobot import, RLDS import (a DROID-sized import projected), frame codecs on natural frames, training reads on natural frames against a
LeRobot-style video reader, mixtures of stores (weighted throughput, streaming from a bucket, resume at 1 M episodes), live recording, the browser viewer on 100,000 episodes (see each module's docstring).
``--smoke`` runs everything on the first few Push-T episodes in seconds (CI runs it); the full run
imports all of Push-T (206 episodes, 25,650 frames) and a two-camera 480x640 LeRobot dataset, about fifteen
minutes on 2 cores (six of them recording in real time; ``python -m benchmarks.record_bench`` runs that section alone).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import zarr

from . import (
    client_bench,
    distributed_bench,
    edit_bench,
    export_bench,
    frames_bench,
    index_bench,
    ingest_bench,
    lerobot_bench,
    mixture_bench,
    natural_training_bench,
    object_bench,
    record_bench,
    rlds_bench,
    sampling_bench,
    stats_bench,
    training_bench,
    viewer_bench,
)
from .common import PUSHT, Table


def _small_source(source: Path, dst: Path, n_episodes: int) -> Path:
    """The first ``n_episodes`` of ``source`` as a zarr v3 diffusion-policy store (float32 images)."""
    src = zarr.open_group(source, mode="r")
    ends = src["meta/episode_ends"][:n_episodes]
    n = int(ends[-1])
    out = zarr.open_group(dst, mode="w")
    for key, arr in src["data"].arrays():
        a = out.create_array(f"data/{key}", shape=(n,) + arr.shape[1:], dtype=arr.dtype,
                             chunks=(min(n, arr.chunks[0]),) + arr.shape[1:])
        a[:] = arr[:n]
    out.create_array("meta/episode_ends", data=ends)
    return dst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny data, seconds (what CI runs)")
    parser.add_argument("--source", type=Path, default=PUSHT, help="diffusion-policy store (default Push-T)")
    args = parser.parse_args(argv)
    if not Path(args.source).is_dir():
        parser.error(f"no diffusion-policy store at {args.source}: pass --source PATH (Push-T is "
                     "shared/data/pusht_cchi_v7_replay.zarr beside the repository)")
    table = Table()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="replaybuf-bench-") as tmp:
        tmp = Path(tmp)
        src = _small_source(args.source, tmp / "src.zarr", 6) if args.smoke else args.source
        dst = tmp / "imported.zarr"
        t_import = ingest_bench.run(table, src, dst, args.smoke)
        ingest_bench.disk(table, src, dst)
        distributed_bench.run(table, src, tmp, args.smoke)
        sampling_bench.run(table, dst, args.smoke)
        training_bench.run(table, dst, tmp, args.smoke)
        client_bench.run(table, src, dst, args.smoke)
        edit_bench.run(table, dst, tmp, args.smoke)
        export_bench.run(table, dst, tmp, t_import)
        stats_bench.run(table, dst, args.smoke)
        object_bench.run(table, dst, tmp, args.smoke, src=src)
        index_bench.run(table, args.smoke)
        lerobot_bench.run(table, tmp, args.smoke)
        rlds_bench.run(table, tmp, args.smoke)
        frames_bench.run(table, args.smoke)
        natural_training_bench.run(table, tmp, args.smoke)
        mixture_bench.run(table, tmp, args.smoke)
        record_bench.run(table, tmp, args.smoke)
        viewer_bench.run(table, tmp, args.smoke)
    print(table.render())
    print(f"\n(total {time.perf_counter() - t0:.0f} s; medians; ratios measured side by side in this run)")
    return 0
