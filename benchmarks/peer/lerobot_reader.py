"""LeRobot 0.6.1 itself reading training samples: CPU-ms per sample, samples/s, time to first batch.

Runs INSIDE the LeRobot venv (``make_lerobot_venv.sh``), never imports replaybuf, prints one JSON
line on stdout (everything else LeRobot says goes to stderr)::

    .venv-lerobot/bin/python benchmarks/peer/lerobot_reader.py ROOT --camera observation.images.cam_high \\
        --workers 2 --batches 10 --seed 0 --backend torchcodec

What it reads: LeRobot's own ``LeRobotDataset(repo_id, root=ROOT, delta_timestamps=...,
video_backend=...)`` under a plain ``torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True,
num_workers=W)`` (torch's default collate, a seeded generator).  A sample is what diffusion-policy
training asks for: 2 camera frames (t - 1/fps, t) as float32 CHW in [0, 1] (LeRobot's default
output), 16 actions (t - 1 .. t + 14 steps) and the state at t, plus LeRobot's own extra keys
(``*_is_pad``, index, task...).

v2.1 datasets: LeRobot 0.6.1 reads only v3.0, so a v2.x ROOT is first converted with LeRobot 0.6.1's
own ``lerobot.scripts.convert_dataset_v21_to_v30.convert_dataset`` on a copy (ROOT is never
written), into ``--convert-dir`` (default ``$TMPDIR/replaybuf-peer-v30``), keyed by ROOT's path and
files; a later run reuses it.  The converter concatenates the episodes' mp4s into one file per
camera (stream copy, no re-encode), as every v3.0 dataset has them.  The JSON says
``converted_from`` and ``loaded_root``.  No network: ``HF_HUB_OFFLINE=1`` and
``HF_DATASETS_OFFLINE=1`` are set before LeRobot is imported.

How CPU is counted (``cpu_method`` in the JSON): user + system time of this process (all its threads,
``os.times``) plus that of its live DataLoader workers (``/proc/<pid>/stat`` utime + stime of every
process whose parent is this one), read right before and right after the timed batches, on the same
iterator (so the workers are alive at both reads).  RUSAGE_CHILDREN is not used: it counts only
reaped children, i.e. a worker's whole life including start-up and warm-up.  The workers keep up to
``2 × W`` batches prefetched at both reads, so in steady state the window's CPU is the CPU of the
timed batches.  The batches are not touched after collation (no copy to a device).

torch's intra-op threads: left at torch's default (one per core) unless ``--torch-threads`` is given.
With 0 workers this matters: LeRobot converts the frames to float (``/ 255``) in this process, and the
idle OpenMP threads of that parallel op spin; on 2 cores that was ~2/3 of the 0-worker CPU on the G1
data (~40 CPU-ms/sample at the default, ~15 with ``--torch-threads 1``).  DataLoader workers always
run with 1 thread.

JSON fields: ``cpu_ms_per_sample`` (and its user / sys parts), ``samples_per_s`` (timed samples / wall
time of the timed batches), ``first_batch_s`` (``iter(loader)`` — worker start included — to the
first batch), ``open_s`` (``LeRobotDataset(...)``), ``samples``, ``wall_s``, versions, the sample's
shapes, ``source_codec`` (info.json's ``video.codec`` of the camera), ``loadavg_1min`` before and
after the timed batches (how busy the machine was).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

try:  # imported as benchmarks.peer.lerobot_reader (tests) ...
    from .cpu_clock import timed_batches
except ImportError:  # ... or run as a script in LeRobot's venv: the module beside it (no replaybuf there)
    from cpu_clock import timed_batches

BATCH = 64
ACTION_STEPS = list(range(-1, 15))  # t-1 .. t+14: 16 actions
FRAME_STEPS = [-1, 0]  # t-1, t: 2 frames


def _info(root: Path) -> dict:
    path = root / "meta" / "info.json"
    if not path.is_file():
        raise SystemExit(f"lerobot_reader: {root} is not a LeRobot dataset (no meta/info.json)")
    return json.loads(path.read_text())


def _tree_key(root: Path) -> str:
    """A key for ROOT's content: its absolute path and every file's name, size and mtime."""
    h = hashlib.sha1(str(root.resolve()).encode())
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            st = os.stat(os.path.join(d, f))
            h.update(f"{os.path.relpath(os.path.join(d, f), root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def ensure_v30(root: Path, repo_id: str, convert_dir: Path) -> tuple[Path, str | None]:
    """``(root to load, version converted from or None)``: ROOT itself when it is v3.x, else a v3.0
    copy made by LeRobot 0.6.1's own converter under ``convert_dir`` (built in a temporary folder
    beside it and renamed into place, so a half-made conversion is never reused)."""
    version = str(_info(root).get("codebase_version", ""))
    if version.startswith("v3"):
        return root, None
    if not version.startswith("v2"):
        raise SystemExit(f"lerobot_reader: {root}: codebase_version {version!r} is neither v2.x nor v3.x")
    dest = convert_dir / f"{root.name}-{_tree_key(root)}"
    if (dest / "meta" / "info.json").is_file():
        return dest, version
    from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset

    convert_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=convert_dir))
    try:
        copy = work / root.name
        shutil.copytree(root, copy)
        for d, _, files in os.walk(copy):  # the source may be read-only
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        convert_dataset(repo_id, root=copy, push_to_hub=False)  # in place: leaves the v2.1 copy as *_old
        try:
            os.rename(copy, dest)
        except OSError:
            if not (dest / "meta" / "info.json").is_file():  # not a concurrent run's finished copy
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest, version


def measure(args: argparse.Namespace) -> dict:
    """Open the dataset with LeRobot, read ``args.warmup`` + ``args.batches`` batches, return the JSON."""
    import importlib.metadata as md

    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(args.root)
    if not root.is_dir():
        raise SystemExit(f"lerobot_reader: no dataset folder {root}")
    info = _info(root)
    feature = info.get("features", {}).get(args.camera)
    videos = sorted(k for k, v in info.get("features", {}).items() if v.get("dtype") == "video")
    if feature is None or feature.get("dtype") != "video":
        raise SystemExit(f"lerobot_reader: {root}: no video feature {args.camera!r} (video features: {videos})")
    for key in (args.action_key, args.state_key):
        if key not in info["features"]:
            raise SystemExit(f"lerobot_reader: {root}: no feature {key!r}")
    repo_id = args.repo_id or f"local/{root.name}"
    loaded_root, converted_from = ensure_v30(root, repo_id, Path(args.convert_dir))
    fps = info["fps"]
    delta = {args.camera: [k / fps for k in FRAME_STEPS], args.action_key: [k / fps for k in ACTION_STEPS]}

    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    t = time.perf_counter()
    ds = LeRobotDataset(repo_id, root=loaded_root, delta_timestamps=delta, video_backend=args.backend)
    open_s = time.perf_counter() - t
    n_batches = -(-len(ds) // args.batch_size)
    if args.warmup + args.batches > n_batches:
        raise SystemExit(f"lerobot_reader: {args.warmup} warm-up + {args.batches} timed batches of {args.batch_size} "
                         f"exceed one epoch of {len(ds)} samples ({n_batches} batches)")
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         generator=gen, persistent_workers=False)
    first, timing = timed_batches(loader, args.warmup, args.batches, args.workers, args.action_key, "lerobot_reader")
    image = first[args.camera]
    return {
        "reader": "lerobot", "lerobot": md.version("lerobot"), "torch": md.version("torch"),
        "torchcodec": md.version("torchcodec"), "av": md.version("av"), "python": sys.version.split()[0],
        "backend": args.backend, "root": str(root), "loaded_root": str(loaded_root),
        "converted_from": converted_from, "camera": args.camera,
        "source_codec": feature.get("info", {}).get("video.codec"), "fps": fps, "dataset_samples": len(ds),
        "workers": args.workers, "batch_size": args.batch_size, "warmup": args.warmup, "batches": args.batches,
        "seed": args.seed, "torch_threads": torch.get_num_threads(), "open_s": open_s, **timing,
        "sample": {"image": list(image.shape[1:]), "image_dtype": str(image.dtype).removeprefix("torch."),
                   "action": list(first[args.action_key].shape[1:]), "state": list(first[args.state_key].shape[1:])},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="LeRobot dataset folder (v3.x, or v2.x: converted first, on a copy)")
    p.add_argument("--camera", required=True, help="video feature key, e.g. observation.images.cam_high")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--batches", type=int, default=10, help="timed batches")
    p.add_argument("--warmup", type=int, default=2, help="batches read before timing (the first included)")
    p.add_argument("--seed", type=int, default=0, help="seed of the DataLoader's shuffle")
    p.add_argument("--backend", choices=("torchcodec", "pyav"), default="torchcodec", help="LeRobot video_backend")
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch.set_num_threads in this process (default: torch's own; workers always use 1)")
    p.add_argument("--batch-size", type=int, default=BATCH)
    p.add_argument("--action-key", default="action")
    p.add_argument("--state-key", default="observation.state")
    p.add_argument("--repo-id", default=None, help="repo_id given to LeRobot (default local/<folder name>)")
    p.add_argument("--convert-dir", default=os.path.join(tempfile.gettempdir(), "replaybuf-peer-v30"),
                   help="where v2.x datasets are converted to v3.0 (reused across runs)")
    args = p.parse_args(argv)
    if args.workers < 0 or args.batches < 1 or args.warmup < 1 or args.batch_size < 1 \
            or (args.torch_threads is not None and args.torch_threads < 1):
        p.error("--workers must be >= 0; --batches, --warmup, --batch-size and --torch-threads >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # LeRobot's and the converter's chatter: stderr
        result = measure(args)
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
