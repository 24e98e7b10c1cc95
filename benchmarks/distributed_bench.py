"""Imports, copies and rechunks on Dask: each serial vs the same work on a local cluster of two worker
processes (``import_dataset(..., client=)``, ``save_to_path(..., client=)``, ``set_chunks`` /
``set_compressors(..., client=)``), side by side, alternating, each in a fresh interpreter.

Also measured: the serial import with a codec pool of one thread (``REPLAYBUF_CODEC_THREADS=1``,
one core's worth), against which two workers of one codec thread each show how the plan scales
per core.  On a 2-core machine the plain serial import already keeps both cores busy (its codec
pool encodes on every core while a thread reads the source), so two workers cannot be much faster
than it.

The cluster is started before the clock starts (its start-up, timed separately, is what
``replaybuf import --workers 2`` adds once per command).  Both imports end verified, with their
statistics stored; the destination's bytes are compared object by object (they must be identical).
The copy (every frame decoded and encoded again) and the rechunk (numeric keys to 100-step chunks,
camera frames recompressed with the ``disk`` preset) start from the serial import's store.
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
import json, shutil, sys, time
from replaybuf_core import ReplayBuffer
from replaybuf_core.importing import import_dataset

def work(op, src, dst, client):
    if op == "import":
        return import_dataset(src, dst, "diffusion-policy", progress=False, overwrite=True, client=client).ok
    if op == "copy":
        with ReplayBuffer.create_from_path(src) as rb:
            rb.save_to_path(dst, client=client)
        return True
    with ReplayBuffer(dst) as rb:  # rechunk (dst: a fresh copy of src, made before the clock starts)
        rb.set_chunks({k: (100,) + tuple(rb.store.shape("data", k)[1:]) for k in rb.keys() if k != "img"},
                      client=client)
        rb.set_compressors({"img": "disk"}, client=client)
    return True

def main():
    op, src, dst, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if op == "rechunk":
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
    if workers == 0:
        t = time.perf_counter()
        ok = work(op, src, dst, None)
        print(json.dumps({"seconds": time.perf_counter() - t, "ok": ok}))
        return
    from replaybuf_core.cluster.clients import cluster_client
    t0 = time.perf_counter()
    with cluster_client(workers=workers) as client:
        client.run(lambda: __import__("replaybuf_core.importing.distributed"))  # workers ready
        started = time.perf_counter() - t0
        t = time.perf_counter()
        ok = work(op, src, dst, client)
        print(json.dumps({"seconds": time.perf_counter() - t, "ok": ok, "startup": started}))

if __name__ == "__main__":
    main()
"""


def _child(op: str, src: Path, dst: Path, workers: int, script: Path, codec_threads: int | None = None) -> dict:
    env = dict(os.environ)
    if codec_threads is not None:
        env["REPLAYBUF_CODEC_THREADS"] = str(codec_threads)
    out = subprocess.run([sys.executable, str(script), op, str(src), str(dst), str(workers)], check=True,
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
        serial.append(_child("import", src, tmp / "serial.zarr", 0, script))
        one_core.append(_child("import", src, tmp / "serial1.zarr", 0, script, codec_threads=1))
        parallel.append(_child("import", src, tmp / "dask.zarr", WORKERS, script))
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
    for op, what in (("copy", "copy (save_to_path)"), ("rechunk", "rechunk + recompress (set_chunks, set_compressors)")):
        times: dict[int, list[float]] = {0: [], WORKERS: []}
        for _ in range(1 if smoke else 2):
            for workers in times:
                r = _child(op, tmp / "serial.zarr", tmp / f"{op}{workers}.zarr", workers, script)
                if not r["ok"]:
                    raise RuntimeError(f"a benchmark {op} failed")
                times[workers].append(r["seconds"])
        if file_digests(tmp / f"{op}0.zarr") != file_digests(tmp / f"{op}{WORKERS}.zarr"):
            raise RuntimeError(f"the Dask {op}'s objects differ from the serial {op}'s")
        t_one, t_many = statistics.median(times[0]), statistics.median(times[WORKERS])
        table.add("dask", f"serial {what}", t_one, "s")
        table.add("dask", f"{what} on {WORKERS} Dask workers (cluster up)", t_many, "s")
        table.ratio("dask", f"serial {op} / {WORKERS} workers (objects identical)", t_one / t_many,
                    "(informative)", True)
