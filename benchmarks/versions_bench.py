"""Curation with versions on a 640x480 video store (issue 50): ``python -m benchmarks.versions_bench
[--episodes 10000] [--steps 12]``.

The store: ``--episodes`` episodes of ``--steps`` steps (12: not a multiple of the GOP, so deleting an
episode shifts every later frame off the chunk grid), a 640x480 camera stored as H.264 video (GOPs of
8 frames a chunk, shards of 64 frames; synthetic frames — one encoded GOP repeated, the store built
by writing its chunk bytes, which the edits below treat like any other) and seven small numeric
keys.  Measured on a fresh copy each (the copy is not timed, and is written back to disk first —
``os.sync`` — so the edit is not measured against the kernel's writeback of the 1.2 GB just built
and copied, which a store recorded earlier does not have):

* ``delete_episodes`` of 1,000 episodes at random places (the first within the first few episodes:
  every later frame moves), frames re-encoded (0 expected), bytes of the versions group after it;
* ``restore`` of the version before the delete (the same rows back);
* opening the older version and reading 1,000 random frames from it against the current version;
* ``log``, ``tag`` and ``gc --keep 1``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

SMALL = {"action": (7,), "state": (14,), "gripper": (2,), "reward": (), "ee_pose": (7,), "joint_vel": (7,),
         "timestamp": ()}
G, SHARD = 8, 64


def _gop_bytes() -> bytes:
    from replaybuf_zarr.codecs.video import VideoCodec

    y, x = np.mgrid[0:480, 0:640]
    frames = np.stack([np.stack([(x + 7 * i) % 256, (y + 3 * i) % 256, ((x + y) // 2 + 11 * i) % 256], -1)
                       for i in range(G)]).astype(np.uint8)
    return VideoCodec(gop=G).encode_frame(frames)


def build(path: Path, episodes: int, steps: int) -> None:
    """The store (see the module docstring)."""
    import zarr

    from replaybuf_core import ReplayBuffer
    from replaybuf_zarr.chunk_writer import make_writer
    from replaybuf_zarr.codecs.video import VideoCodec

    n = episodes * steps
    rb = ReplayBuffer.create_empty("zarr", str(path))
    rb.close()
    g = zarr.open_group(str(path), mode="a")
    cam = g["data"].create_array("camera", shape=(n, 480, 640, 3), dtype=np.uint8, chunks=(G, 480, 640, 3),
                                 shards=(SHARD, 480, 640, 3), serializer=VideoCodec(gop=G), compressors=None)
    gop = _gop_bytes()
    writer = make_writer(cam)
    n_chunks = -(-n // G)
    per = SHARD // G
    for first in range(0, n_chunks, per):
        writer._store_objects(first, [gop] * min(per, n_chunks - first))
    rng = np.random.default_rng(0)
    for k, shape in SMALL.items():
        g["data"].create_array(k, data=rng.standard_normal((n,) + shape).astype(np.float32), chunks=(4096,) + shape)
    ends = g["meta/episode_ends"]
    ends.resize((episodes,))
    ends[:] = np.arange(1, episodes + 1, dtype=np.int64) * steps
    g["meta"].attrs["replaybuf_commit"] = {"n_episodes": episodes, "n_steps": n, "generation": 0}


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.versions_bench", description=__doc__)
    parser.add_argument("--episodes", type=int, default=10000)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--deletes", type=int, default=1000)
    args = parser.parse_args(argv)
    from replaybuf_core import ReplayBuffer
    from replaybuf_core.store import versions

    tmp = Path(tempfile.mkdtemp(prefix="versions_bench-"))
    try:
        base = tmp / "base.zarr"
        t = time.perf_counter()
        build(base, args.episodes, args.steps)
        print(f"built {args.episodes} episodes x {args.steps} steps of 640x480 video: {_bytes(base) / 1e6:.0f} MB "
              f"in {time.perf_counter() - t:.1f} s")
        work = tmp / "work.zarr"
        shutil.copytree(base, work)
        os.sync()
        rng = np.random.default_rng(1)
        gone = np.sort(rng.choice(args.episodes, args.deletes, replace=False))
        with ReplayBuffer(str(work)) as rb:
            t = time.perf_counter()
            versions.tag(rb.store, "raw", versions.note_appends(rb.store, rb.n_episodes, rb.n_steps, force=True)[-1]["id"])
            tag_s = time.perf_counter() - t
            t = time.perf_counter()
            report = rb.delete_episodes(gone)
            delete_s = time.perf_counter() - t
        print(f"delete_episodes of {args.deletes} random episodes (first: {gone[0]}): {delete_s:.2f} s; frames "
              f"re-encoded {report.frames_reencoded}, moved {report.reencoded['camera'].moved}; store "
              f"{_bytes(base) / 1e6:.0f} -> {_bytes(work) / 1e6:.0f} MB (versions group "
              f"{_bytes(work / 'versions') / 1e6:.0f} MB)")
        t = time.perf_counter()
        with ReplayBuffer(str(work), version="raw") as old, ReplayBuffer(str(work), read_only=True) as now:
            open_s = time.perf_counter() - t
            rows = np.sort(rng.choice(old.n_steps, 200, replace=False))
            t = time.perf_counter()
            old["camera"][rows]
            old_s = time.perf_counter() - t
            rows = np.sort(rng.choice(now.n_steps, 200, replace=False))
            t = time.perf_counter()
            now["camera"][rows]
            now_s = time.perf_counter() - t
        print(f"open version 'raw' {open_s * 1e3:.0f} ms; 200 random frames: older version {old_s * 1e3:.0f} ms, "
              f"current {now_s * 1e3:.0f} ms; tag {tag_s * 1e3:.1f} ms")
        with ReplayBuffer(str(work)) as rb:
            t = time.perf_counter()
            rb.restore("raw")
            restore_s = time.perf_counter() - t
            t = time.perf_counter()
            n_log = len(versions.log(rb.store))
            log_s = time.perf_counter() - t
            versions.untag(rb.store, "raw")  # (a tag pins its version against gc)
            t = time.perf_counter()
            versions.gc(rb.store, keep=1, store_dir=work)
            gc_s = time.perf_counter() - t
        print(f"restore 'raw': {restore_s:.2f} s; log ({n_log} versions) {log_s * 1e3:.1f} ms; gc --keep 1 "
              f"{gc_s:.2f} s; store after gc {_bytes(work) / 1e6:.0f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
