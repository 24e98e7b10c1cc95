"""Imports on Dask: the serial import vs the same import on a local cluster of two worker processes
(``import_dataset(..., client=)``), side by side, alternating, each in a fresh interpreter.

Also measured: the serial import with a codec pool of one thread (``REPLAYBUF_CODEC_THREADS=1``,
one core's worth), against which two workers of one codec thread each show how the plan scales
per core.  On a 2-core machine the plain serial import already keeps both cores busy (its codec
pool encodes on every core while a thread reads the source), so two workers cannot be much faster
than it.

The cluster is started before the clock starts (its start-up, timed separately, is what
``replaybuf import --workers 2`` adds once per command).  Both imports end verified, with their
statistics stored; the destination's bytes are compared object by object (they must be identical).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from replaybuf_core.testing.files import file_digests

from .common import Table

WORKERS = 2

_CHILD = """
import json, sys, time
from replaybuf_core.importing import import_dataset

def main():
    src, dst, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if workers == 0:
        t = time.perf_counter()
        report = import_dataset(src, dst, "diffusion-policy", progress=False, overwrite=True)
        print(json.dumps({"seconds": time.perf_counter() - t, "ok": report.ok}))
        return
    from replaybuf_core.cluster import cluster_client
    t0 = time.perf_counter()
    with cluster_client(workers=workers) as client:
        client.run(lambda: __import__("replaybuf_core.importing.distributed"))  # workers ready
        started = time.perf_counter() - t0
        t = time.perf_counter()
        report = import_dataset(src, dst, "diffusion-policy", progress=False, overwrite=True, client=client)
        print(json.dumps({"seconds": time.perf_counter() - t, "ok": report.ok, "startup": started}))

if __name__ == "__main__":
    main()
"""


def _import(src: Path, dst: Path, workers: int, script: Path, codec_threads: int | None = None) -> dict:
    env = dict(os.environ)
    if codec_threads is not None:
        env["REPLAYBUF_CODEC_THREADS"] = str(codec_threads)
    out = subprocess.run([sys.executable, str(script), str(src), str(dst), str(workers)], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(table: Table, src: Path, tmp: Path, smoke: bool) -> None:
    if importlib.util.find_spec("distributed") is None:
        table.add("dask", "skipped: dask.distributed not installed (pip install 'replaybuf[dask]')", 0, "")
        return
    script = tmp / "dask_import_child.py"
    script.write_text(_CHILD)
    serial, one_core, parallel = [], [], []
    for _ in range(1 if smoke else 2):  # alternating: the machine's speed drifts over seconds
        serial.append(_import(src, tmp / "serial.zarr", 0, script))
        one_core.append(_import(src, tmp / "serial1.zarr", 0, script, codec_threads=1))
        parallel.append(_import(src, tmp / "dask.zarr", WORKERS, script))
    if not all(r["ok"] for r in serial + one_core + parallel):
        raise RuntimeError("a benchmark import failed its verification")
    same = file_digests(tmp / "serial.zarr") == file_digests(tmp / "dask.zarr")
    t_serial = statistics.median(r["seconds"] for r in serial)
    t_dask = statistics.median(r["seconds"] for r in parallel)
    t_one = statistics.median(r["seconds"] for r in one_core)
    table.add("dask", "serial import (verified, stats stored)", t_serial, "s")
    table.add("dask", "serial import, one codec thread (REPLAYBUF_CODEC_THREADS=1)", t_one, "s")
    table.add("dask", f"import on {WORKERS} Dask workers (cluster up)", t_dask, "s")
    table.add("dask", f"local cluster start-up ({WORKERS} workers)", statistics.median(r["startup"] for r in parallel),
              "s")
    table.ratio("dask", f"serial / {WORKERS} workers", t_serial / t_dask, ">= 1.6", t_serial / t_dask >= 1.6)
    table.ratio("dask", f"serial on one codec thread / {WORKERS} workers of one each", t_one / t_dask,
                f"(scaling; {WORKERS} ideal)", t_one / t_dask >= 1.6)
    table.ratio("dask", "objects identical to the serial import (1 = yes)", float(same), "= 1", same)
    if not same:
        raise RuntimeError("the Dask import's objects differ from the serial import's")
