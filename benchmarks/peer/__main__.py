"""``python -m benchmarks.peer ROOT[=LABEL] ... --camera KEY``: LeRobot 0.6.1 alone on each dataset, with
each worker count, in interleaved rounds (round r runs every dataset × workers once, in order);
prints every run's JSON line to stderr and a table of min–max (median) per configuration on stdout.
The lead's benchmark calls :func:`benchmarks.peer.run_lerobot` itself; this is for a quick look."""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from . import lerobot_missing, run_lerobot


def _span(values: list[float], fmt: str) -> str:
    return f"{fmt.format(min(values))}–{fmt.format(max(values))} ({fmt.format(statistics.median(values))})"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("roots", nargs="+", help="LeRobot dataset folders, each optionally ROOT=LABEL")
    p.add_argument("--camera", required=True)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="round r uses seed + r")
    p.add_argument("--backend", default="torchcodec", choices=("torchcodec", "pyav"))
    p.add_argument("--torch-threads", type=int, default=None, help="torch threads of the reading process")
    args = p.parse_args(argv)
    reason = lerobot_missing()
    if reason:
        print(reason)
        return
    configs = [(*(r.split("=", 1) if "=" in r else (r, r)), w) for r in args.roots for w in args.workers]
    runs: dict[tuple[str, int], list[dict]] = {(label, w): [] for _, label, w in configs}
    for r in range(args.rounds):
        for root, label, w in configs:
            got = run_lerobot(root, args.camera, w, args.batches, args.seed + r, backend=args.backend,
                              torch_threads=args.torch_threads)
            print(json.dumps({"round": r, "label": label, **got}), file=sys.stderr, flush=True)
            runs[(label, w)].append(got)
    threads = "torch's default" if args.torch_threads is None else args.torch_threads
    print(f"LeRobot 0.6.1 ({args.backend}, torch threads {threads}), batch 64, {args.batches} timed batches, {args.rounds} rounds: "
          "min–max (median)")
    print(f"{'data':<24} {'workers':>7}  {'CPU-ms/sample':<22} {'of which sys':<22} {'samples/s':<22} first batch s")
    for (label, w), got in runs.items():
        print(f"{label:<24} {w:>7}  {_span([g['cpu_ms_per_sample'] for g in got], '{:.1f}'):<22} "
              f"{_span([g['cpu_sys_ms_per_sample'] for g in got], '{:.1f}'):<22} "
              f"{_span([g['samples_per_s'] for g in got], '{:.1f}'):<22} "
              f"{_span([g['first_batch_s'] for g in got], '{:.2f}')}")


if __name__ == "__main__":
    main()
