"""Choosing the versioning engine (issue 50): Icechunk under zarr-python against our own commit record.

``python -m benchmarks.engine_choice [--episodes N] [--steps T]`` (needs ``pip install icechunk``;
without it the Icechunk half is skipped and says so).  Both sides store the same recording: ``N``
episodes of ``T`` steps (30 fps), eight arrays (a 240x320 RGB camera, chunks of 32 frames, and seven
small numeric keys), one commit per episode, as a recorder does.  Measured, each side:

* **commit per episode**: the commit alone (Icechunk: ``session.commit``, which writes the snapshot and
  the manifests of every array it touched; ours: ``meta/episode_ends`` + the commit record), median
  and last, against the 1/30 s a step lasts and the T/30 s an episode lasts;
* **delete the first episode**: every row after it moves one episode down.  Icechunk versions chunks,
  not rows: the shifted rows are new chunks (read, re-chunked, written, committed).  Ours: the edit
  engine of :mod:`replaybuf_core.store.editing` (byte-for-byte chunk moves);
* **restore** the version before the delete (Icechunk: ``reset_branch`` to the snapshot);
* **read** the camera array whole through zarr-python (Icechunk's session store against a plain
  ``LocalStore``); our chunk reader reads files / objects directly and would need a read path through
  the session store (not built).

The decision and its numbers are in ``docs/architecture.md`` ("Versions").
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

KEYS = {"camera": ((240, 320, 3), np.uint8, 32), "action": ((7,), np.float32, 1024),
        "state": ((14,), np.float32, 1024), "gripper": ((2,), np.float32, 1024), "reward": ((), np.float32, 1024),
        "done": ((), np.bool_, 1024), "ee_pose": ((7,), np.float32, 1024), "joint_vel": ((7,), np.float32, 1024)}


def _episode(rng: np.random.Generator, steps: int) -> dict[str, np.ndarray]:
    out = {}
    for k, (shape, dtype, _) in KEYS.items():
        if dtype == np.uint8:
            out[k] = rng.integers(0, 255, (steps,) + shape, dtype=np.uint8) // 16 * 16  # compressible
        else:
            out[k] = rng.standard_normal((steps,) + shape).astype(dtype)
    return out


def icechunk_side(tmp: Path, episodes: list[dict], steps: int) -> dict[str, float] | None:
    try:
        import icechunk
    except ImportError:
        print("icechunk is not installed: skipping its half (pip install icechunk)")
        return None
    import zarr

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp / "ice")))
    session = repo.writable_session("main")
    root = zarr.group(store=session.store)
    for k, (shape, dtype, chunk) in KEYS.items():
        root.create_array(f"data/{k}", shape=(0,) + shape, dtype=dtype, chunks=(chunk,) + shape)
    root.create_array("meta/episode_ends", shape=(0,), dtype=np.int64, chunks=(4096,))
    session.commit("create")
    commits, totals, n = [], [], 0
    snapshots = []
    for ep in episodes:
        t0 = time.perf_counter()
        session = repo.writable_session("main")
        root = zarr.open_group(session.store)
        for k, v in ep.items():
            arr = root[f"data/{k}"]
            arr.resize((n + steps,) + arr.shape[1:])
            arr[n:n + steps] = v
        ends = root["meta/episode_ends"]
        ends.resize((ends.shape[0] + 1,))
        ends[-1] = n + steps
        n += steps
        t = time.perf_counter()
        snapshots.append(session.commit(f"episode {len(snapshots)}"))
        commits.append(time.perf_counter() - t)
        totals.append(time.perf_counter() - t0)
    # delete the first episode: every later row moves (new chunks), one commit
    t = time.perf_counter()
    session = repo.writable_session("main")
    root = zarr.open_group(session.store)
    for k in KEYS:
        arr = root[f"data/{k}"]
        rest = arr[steps:]
        arr[: n - steps] = rest
        arr.resize((n - steps,) + arr.shape[1:])
    ends = root["meta/episode_ends"]
    e = ends[:]
    ends.resize((e.size - 1,))
    ends[:] = e[1:] - steps
    session.commit("delete episode 0")
    delete = time.perf_counter() - t
    t = time.perf_counter()
    repo.reset_branch("main", snapshots[-1])
    restore = time.perf_counter() - t
    t = time.perf_counter()
    ro = repo.readonly_session("main")
    frames = zarr.open_group(ro.store, mode="r")["data/camera"][:]
    read = time.perf_counter() - t
    assert frames.shape[0] == n
    return {"commit_median": statistics.median(commits), "commit_last": commits[-1],
            "episode_median": statistics.median(totals), "delete_first": delete, "restore": restore, "read_camera": read, "bytes_read": frames.nbytes}


def ours_side(tmp: Path, episodes: list[dict], steps: int) -> dict[str, float]:
    import zarr

    from replaybuf_core import ReplayBuffer

    path = tmp / "ours.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        pass
    totals = []
    with ReplayBuffer(str(path)) as rb:
        for ep in episodes:
            t0 = time.perf_counter()
            rb.add_episode(ep)  # rows, then meta/episode_ends and the commit record
            totals.append(time.perf_counter() - t0)
    with ReplayBuffer(str(path)) as rb:
        t = time.perf_counter()
        rb.delete_episodes([0])
        delete = time.perf_counter() - t
    t = time.perf_counter()
    frames = zarr.open_group(str(path), mode="r")["data/camera"][:]
    read = time.perf_counter() - t
    return {"episode_median": statistics.median(totals), "delete_first": delete, "read_camera": read, "bytes_read": frames.nbytes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_choice", description=__doc__)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    episodes = [_episode(rng, args.steps) for _ in range(args.episodes)]
    tmp = Path(tempfile.mkdtemp(prefix="engine_choice-"))
    try:
        ice = icechunk_side(tmp, episodes, args.steps)
        ours = ours_side(tmp, episodes, args.steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.episodes} episodes x {args.steps} steps, 8 arrays (one step = {1000 / 30:.1f} ms)")
    for name, res in (("icechunk", ice), ("ours", ours)):
        if res is None:
            continue
        commit = (f" (its commit {res['commit_median'] * 1e3:.1f} ms, last {res['commit_last'] * 1e3:.1f} ms)"
                  if "commit_median" in res else "")
        print(f"{name:9s} write+commit/episode median {res['episode_median'] * 1e3:7.1f} ms{commit}"
              f"  delete first episode {res['delete_first']:6.2f} s"
              + (f"  restore {res['restore'] * 1e3:6.1f} ms" if "restore" in res else "")
              + f"  read camera {res['bytes_read'] / res['read_camera'] / 1e6:7.0f} MB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
