"""Crash soak: SIGKILL writer processes at random moments, many times per operation, and count.

    python -m benchmarks.soak [--trials N] [--kinds add_episode,writer,...] [--seed S] [--backend hdf5]

For every kind of write (see :mod:`replaybuf_core.testing.crash`) a child process repeats the
operation on a zarr LocalStore buffer (or an HDF5 file with ``--backend hdf5``: the kinds of
``crash.BACKEND_KINDS``) and is killed after a random delay; the parent reopens the store and
checks it (every committed episode bit-exact, at most the in-flight one missing, appending works).
Prints one row per kind: trials, clean opens, episodes lost beyond the in-flight one (goal: N / N / 0).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from replaybuf_core.testing import crash

#: kind → largest kill delay (s): a few calls of the operation, so kills land anywhere in it
MAX_DELAY = {"add_episode": 0.3, "writer": 0.4, "writer_frames": 0.4, "drop_episode": 0.3, "pop_episode": 0.3,
             "set_chunks": 0.8, "set_compressors": 0.8, "rechunk_recompress": 0.8, "delete_episodes": 1.5,
             "delete_frames": 1.5}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=50, help="kills per kind (default 50)")
    p.add_argument("--kinds", default=None, help="comma-separated kinds (default: all the backend has)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="zarr", choices=("zarr", "hdf5"),
                   help="zarr LocalStore directories (default) or HDF5 files (replaybuf-hdf5)")
    args = p.parse_args(argv)
    default = crash.KINDS if args.backend == "zarr" else crash.BACKEND_KINDS
    kinds = [k for k in (args.kinds or ",".join(default)).split(",") if k]
    suffix = ".zarr" if args.backend == "zarr" else ".h5"
    rng = np.random.default_rng(args.seed)
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="replaybuf-soak-") as tmp:
        for kind in kinds:
            path = Path(tmp) / f"{kind}{suffix}"
            crash.create(path, kind=kind, backend=args.backend)
            t0 = time.perf_counter()
            results = [crash.run_trial(kind, path, rng, max_delay=MAX_DELAY.get(kind, 0.5))
                       for _ in range(args.trials)]
            clean = sum(r.clean_open for r in results)
            lost = sum(r.lost for r in results)
            calls = sum(r.done for r in results)
            rows.append((kind, len(results), clean, lost, calls, time.perf_counter() - t0))
            failures += [r for r in results if not r.clean_open or r.lost]
            print(f"{kind}: {clean}/{len(results)} clean, {lost} lost", file=sys.stderr, flush=True)
    print(f"backend: {args.backend}")
    print(f"{'kind':<20} {'trials':>6} {'clean opens':>11} {'lost beyond in-flight':>21} "
          f"{'calls done':>10} {'time s':>7}")
    for kind, n, clean, lost, calls, dt in rows:
        print(f"{kind:<20} {n:>6} {clean:>11} {lost:>21} {calls:>10} {dt:>7.1f}")
    for r in failures[:20]:
        print(f"FAILED {r.kind}: {r.error}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
