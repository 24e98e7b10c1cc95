"""replaybuf reading the same training samples as ``lerobot_reader.py``, counted the same way.

Runs in replaybuf's venv, one process per measurement (as LeRobot's reader does), prints one JSON line::

    python -m benchmarks.peer.replaybuf_reader STORE --camera observation.images.cam_high \\
        --dataset lerobot --workers 0 --batches 8 --seed 0

What it reads, under a plain ``torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True,
num_workers=W)`` (torch's default collate, a seeded generator, nothing else):

* ``--dataset lerobot``: the drop-in, ``replaybuf_core.torch.LeRobotDataset(STORE,
  delta_timestamps=...)`` — LeRobot's own constructor call on our store;
* ``--dataset window``: the native ``WindowDataset(STORE, delta_timestamps=..., channels_first=True,
  float_images=True)`` (LeRobot's output format, asked for by its two flags);
* ``--streaming``: the native dataset in streaming epochs (``StreamingWindowDataset``, its default
  block and shuffle-buffer sizes; its ``correlation()`` goes in the JSON).

The sample is the peer's: 2 camera frames (t - 1/fps, t) as float32 CHW in [0, 1], 16 actions
(t - 1 .. t + 14 steps), the state at t.  CPU: :mod:`cpu_clock` (this process and its live workers,
around the timed batches, after ``--warmup`` batches).  The JSON has the fields of
``lerobot_reader.py``'s that apply (``cpu_ms_per_sample`` and its parts, ``samples_per_s``,
``first_batch_s`` from ``iter(loader)``, ``open_s``, ``loadavg_1min``, the sample's shapes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .cpu_clock import timed_batches
from .lerobot_reader import ACTION_STEPS, BATCH, FRAME_STEPS


def measure(args: argparse.Namespace) -> dict:
    """Open the dataset, read ``args.warmup`` + ``args.batches`` batches, return the JSON."""
    import torch

    from replaybuf_core import ReplayBuffer
    from replaybuf_core.torch import LeRobotDataset, StreamingWindowDataset, WindowDataset

    fps = ReplayBuffer.create_from_path(args.store).store.get_attrs("data").get("fps")
    if fps is None:
        raise SystemExit(f"replaybuf_reader: {args.store} records no fps")
    delta = {args.camera: [k / fps for k in FRAME_STEPS], args.action_key: [k / fps for k in ACTION_STEPS],
             args.state_key: [0.0]}
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    t = time.perf_counter()
    if args.dataset == "lerobot":
        ds = LeRobotDataset(args.store, delta_timestamps=delta)
    elif args.streaming:
        ds = StreamingWindowDataset(args.store, delta_timestamps=delta, channels_first=True, float_images=True,
                                    batch_size=args.batch_size, seed=args.seed)
    else:
        ds = WindowDataset(args.store, delta_timestamps=delta, channels_first=True, float_images=True)
    n = len(ds)
    open_s = time.perf_counter() - t
    n_batches = -(-n // args.batch_size)
    if args.warmup + args.batches > n_batches:
        raise SystemExit(f"replaybuf_reader: {args.warmup} warm-up + {args.batches} timed batches of "
                         f"{args.batch_size} exceed one epoch of {n} samples ({n_batches} batches)")
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    if args.streaming:
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                             generator=gen, persistent_workers=False)
    first, timing = timed_batches(loader, args.warmup, args.batches, args.workers, args.action_key, "replaybuf_reader")
    image = first[args.camera]
    return {
        "reader": "replaybuf-" + args.dataset + ("-streaming" if args.streaming else ""), "store": args.store,
        "camera": args.camera, "fps": fps, "dataset_samples": n, "workers": args.workers,
        "batch_size": args.batch_size, "warmup": args.warmup, "batches": args.batches, "seed": args.seed,
        "torch_threads": torch.get_num_threads(), "open_s": open_s, **timing,
        "sample": {"image": list(image.shape[1:]), "image_dtype": str(image.dtype).removeprefix("torch."),
                   "action": list(first[args.action_key].shape[1:])},
        **({"correlation": ds.correlation(), "block_windows": ds.block_windows, "buffer_windows": ds.buffer_windows}
           if args.streaming else {}),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("store", help="a replaybuf store (e.g. a `replaybuf import lerobot` of the peer's dataset)")
    p.add_argument("--camera", required=True)
    p.add_argument("--dataset", choices=("lerobot", "window"), default="lerobot",
                   help="lerobot: the drop-in LeRobotDataset; window: the native WindowDataset")
    p.add_argument("--streaming", action="store_true", help="the native dataset's streaming epochs")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=BATCH)
    p.add_argument("--action-key", default="action")
    p.add_argument("--state-key", default="observation.state")
    args = p.parse_args(argv)
    if args.workers < 0 or args.batches < 1 or args.warmup < 1 or args.batch_size < 1:
        p.error("--workers must be >= 0; --batches, --warmup and --batch-size >= 1")
    if args.streaming and args.dataset != "window":
        p.error("--streaming is the native dataset's (--dataset window)")
    return args


def main(argv: list[str] | None = None) -> None:
    out = json.dumps(measure(parse_args(argv)))
    sys.stdout.write(out + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
