"""Recording: two 640x480 natural cameras plus 32-D state and action at 30 fps, paced by the wall clock
as a robot loop is, into a new store through :class:`~replaybuf_core.recording.Recorder` — episodes of
15 s; ``add_frame`` latency, the queue's deepest lag, ``save_episode`` time, CPU cores used and frames
lost, for the fast (JPEG) and exact (JPEG XL) codecs.  The full run records 5 minutes with the fast
codec and 1 minute with the exact one; the smoke run 3 s each.  With gymnasium installed, CartPole's
``step`` with and without :class:`~replaybuf_core.recording.gym.RecordEpisodes`."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer
from replaybuf_core.recording import Recorder

from .common import Table
from .frames_bench import natural_frames

FPS = 30
EPISODE_S = 15


def _cameras(n: int) -> tuple[np.ndarray, np.ndarray]:
    got = natural_frames(n, 1)
    if got is None:
        rng = np.random.default_rng(0)
        base = rng.integers(0, 256, (n, 480, 640, 3), dtype=np.uint8)
        return base, base[::-1].copy()
    big = got[1]
    return big, np.ascontiguousarray(big[:, ::-1])  # a second camera: the mirror image


def record(path: Path, frames: str, seconds: float, cams: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    rng = np.random.default_rng(1)
    n = int(seconds * FPS)
    per_episode = min(n, EPISODE_S * FPS)
    latencies, saves = [], []
    cpu0, t_start = os.times(), time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, Recorder(path, fps=FPS, frames=frames) as rec:
        warnings.simplefilter("always")
        next_t = time.perf_counter()
        for i in range(n):
            now = time.perf_counter()
            if now < next_t:
                time.sleep(next_t - now)
            next_t += 1.0 / FPS
            k = i % len(cams[0])
            frame = {"observation.images.top": cams[0][k], "observation.images.wrist": cams[1][k],
                     "observation.state": rng.random(32, dtype=np.float32),
                     "action": rng.random(32, dtype=np.float32)}
            t0 = time.perf_counter()
            rec.add_frame(frame)
            latencies.append(time.perf_counter() - t0)
            if (i + 1) % per_episode == 0 or i == n - 1:
                saves.append(rec.save_episode().save_seconds)
                next_t = time.perf_counter() + 1.0 / FPS
        lag = rec.max_lag_frames
    wall = time.perf_counter() - t_start
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    with ReplayBuffer.create_from_path(path) as rb:
        stored = rb.n_steps
    return {"p99_ms": float(np.percentile(latencies, 99)) * 1e3, "max_ms": max(latencies) * 1e3, "lag": lag,
            "save_s": max(saves), "cores": cpu / wall, "lost": n - stored, "lag_warnings": len(caught),
            "realtime": n / FPS / wall}


def _gym(table: Table, tmp: Path, steps: int) -> None:
    try:
        import gymnasium as gym
    except ImportError:
        table.add("record", "gymnasium not installed: CartPole rows skipped", 0, "")
        return
    from replaybuf_core.recording.gym import RecordEpisodes

    def run(env) -> float:
        env.reset(seed=0)
        t0 = time.perf_counter()
        for _ in range(steps):
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        seconds = time.perf_counter() - t0
        env.close()
        return seconds

    bare = run(gym.make("CartPole-v1"))
    recorded = run(RecordEpisodes(gym.make("CartPole-v1"), tmp / "cartpole.zarr"))
    table.add("record", f"CartPole step, bare ({steps} steps)", bare / steps * 1e6, "us")
    table.add("record", "CartPole step, recorded (RecordEpisodes)", recorded / steps * 1e6, "us")
    table.ratio("record", "CartPole recording overhead per step (us)", (recorded - bare) / steps * 1e6, "(shown)", True)


def run(table: Table, tmp: Path, smoke: bool) -> None:
    cams = _cameras(60 if smoke else 300)
    for frames, seconds in (("fast", 3 if smoke else 300), ("exact", 3 if smoke else 60)):
        r = record(tmp / f"recorded-{frames}.zarr", frames, seconds, cams)
        label = f"{frames}, 2x640x480 + 32-D at 30 fps, {seconds} s"
        table.add("record", f"{label}: add_frame p99", r["p99_ms"], "ms")
        table.add("record", f"{label}: add_frame max", r["max_ms"], "ms")
        table.add("record", f"{label}: deepest queue", r["lag"], "frames", "{:.0f}")
        table.add("record", f"{label}: slowest save_episode (15 s episode)", r["save_s"], "s")
        table.add("record", f"{label}: CPU cores used", r["cores"], "cores")
        table.add("record", f"{label}: recorded / wall time", r["realtime"], "x")
        table.ratio("record", f"{frames}: frames lost", r["lost"], "= 0", r["lost"] == 0)
        if frames == "fast":
            table.ratio("record", "fast: add_frame p99 (ms)", r["p99_ms"], "< 10", r["p99_ms"] < 10)
            table.ratio("record", "fast: CPU cores to keep real time", r["cores"], "<= 1", r["cores"] <= 1)
            table.ratio("record", "fast: slowest save_episode (s)", r["save_s"], "< 0.5 (LeRobot: 30-40)",
                        r["save_s"] < 0.5)
        else:
            table.ratio("record", "exact: CPU cores to keep real time", r["cores"], "(shown)", True)
    _gym(table, tmp, 1000 if smoke else 10_000)


def main(argv=None) -> int:
    """``python -m benchmarks.record_bench [--smoke]``: this section alone."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m benchmarks.record_bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="3 s of each codec, 1,000 CartPole steps")
    args = parser.parse_args(argv)
    table = Table()
    with tempfile.TemporaryDirectory(prefix="replaybuf-record-") as tmp:
        run(table, Path(tmp), args.smoke)
    print(table.render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
