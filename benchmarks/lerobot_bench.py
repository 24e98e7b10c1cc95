"""LeRobot import: time against its floor, and peak memory against episode length.

The dataset is written here (``replaybuf_core.testing.lerobot_writer``, LeRobot v3.0 layout): two
cameras of 480×640 at 30 fps, x264 in mp4 — the size of a real tabletop dataset.  *Floor*: decoding
every source frame with PyAV (one decode thread per video in turn) while encoding every frame with
the import's default frame codec (``exact``, its ``encode_frame``) on a thread pool of the codec pool's size — nothing else (no
parquet, no matching, no writing, no checking).  Import and floor alternate (medians).  Peak RSS
(VmHWM of a fresh interpreter) is measured on one episode of ``N`` and of ``3N`` frames: streaming
keeps it flat, whatever the length.

*Tiers*: the same dataset imported into each frame tier (``exact``, ``fast``, ``video``): CPU
milliseconds a frame (user + system of the importing process, everything included: decode, encode,
write, verification) and the store's bytes against the source's (parquet + mp4).

*Pass-through*: a dataset as LeRobot writes it (AV1, GOP 2, libsvtav1), imported with
``video="passthrough"`` (the mp4 packets kept) and, side by side in the same run, re-encoded with
lossless WebP (``frames="webp"``, the decode-and-WebP import) and ``exact``: CPU ms a frame, wall
time, store bytes over the source's.  Both are verified bit for bit against PyAV's decode.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import Table, dir_bytes

_CHILD = """
import json, os, sys, time
from replaybuf_core.importing import import_dataset
t, c = time.perf_counter(), os.times()
report = import_dataset(sys.argv[1], sys.argv[2], progress=False, overwrite=True, frames=sys.argv[3],
                        format_options={"video": sys.argv[4]})
dt, c2 = time.perf_counter() - t, os.times()
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
cpu = (c2.user - c.user) + (c2.system - c.system)
print(json.dumps({"seconds": dt, "cpu": cpu, "ok": report.ok, "maxrss_kb": hwm, "steps": report.n_steps}))
"""


def _import(src: Path, dst: Path, frames: str = "exact", video: str = "reencode") -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(dst), frames, video], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _dataset(root: Path, lengths: list[int], h: int, w: int) -> Path:
    from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset

    spec = Spec(lengths, fps=30, cameras={"observation.images.top": Camera(h, w, gop=30),
                                          "observation.images.wrist": Camera(h, w, gop=30)},
                episodes_per_file=len(lengths), state_dim=14)
    return write_dataset(root, spec, "v3.0")


def floor(src: Path) -> float:
    """Seconds to decode every frame of every video under ``src`` and encode it (see above)."""
    import av

    from replaybuf_core.layout.frame_choice import parse_frame_choice
    from replaybuf_zarr.frame_choice import zarr_frame_codec

    codec = zarr_frame_codec(parse_frame_choice("exact"))

    videos = sorted(src.rglob("*.mp4"))
    t = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        futures = []
        for v in videos:
            with av.open(str(v)) as c:
                s = c.streams.video[0]
                s.thread_type = "AUTO"
                for f in c.decode(s):
                    futures.append(pool.submit(codec.encode_frame, f.to_ndarray(format="rgb24")[None]))
        for f in futures:
            f.result()
    return time.perf_counter() - t


def run(table: Table, tmp: Path, smoke: bool) -> None:
    try:
        import av  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        table.add("lerobot", "skipped: pip install 'replaybuf[lerobot]'", 0, "")
        return
    h, w = (96, 128) if smoke else (480, 640)
    n = 10 if smoke else 90
    src = _dataset(tmp / "lerobot_src", [n, n], h, w)
    imports, floors = [], []
    for _ in range(1 if smoke else 2):
        imports.append(_import(src, tmp / "lerobot.zarr"))
        floors.append(floor(src))
    if not all(r["ok"] for r in imports):
        raise RuntimeError("the LeRobot benchmark import failed its verification")
    t_import, t_floor = statistics.median(r["seconds"] for r in imports), statistics.median(floors)
    frames = 2 * imports[0]["steps"]
    table.add("lerobot", f"import, 2 cameras {h}x{w} ({frames} frames, verified)", t_import, "s")
    table.add("lerobot", "floor: PyAV decode + frame encode, same threads", t_floor, "s")
    short = _import(_dataset(tmp / "lerobot_short", [n], h, w), tmp / "short.zarr")
    long = _import(_dataset(tmp / "lerobot_long", [3 * n], h, w), tmp / "long.zarr")
    rss_short, rss_long = short["maxrss_kb"] / 1024, long["maxrss_kb"] / 1024
    table.add("lerobot", f"peak RSS, one episode of {n} frames", rss_short, "MB", "{:.0f}")
    table.add("lerobot", f"peak RSS, one episode of {3 * n} frames", rss_long, "MB", "{:.0f}")
    r = t_floor / t_import
    table.ratio("lerobot", "floor / import time", r, ">= 0.7", r >= 0.7)
    table.ratio("lerobot", f"peak RSS (MB), {3 * n}-frame episode", rss_long, "< 1000", rss_long < 1000)
    g = rss_long / rss_short
    table.ratio("lerobot", "peak RSS, 3x longer episode / shorter", g, "< 1.5 (flat)", g < 1.5)
    cpu = {}
    for tier in ("exact", "fast", "video"):
        dst = tmp / f"lerobot_{tier}.zarr"
        r = _import(src, dst, tier) if tier != "exact" else imports[0]
        if not r["ok"]:
            raise RuntimeError(f"the LeRobot benchmark import ({tier}) failed its verification")
        if tier == "exact":
            dst = tmp / "lerobot.zarr"
        cpu[tier] = r["cpu"] / frames * 1e3
        table.add("lerobot", f"import CPU a frame, frames={tier}", cpu[tier], "ms", "{:.1f}")
        table.add("lerobot", f"store bytes / the source's, frames={tier}", dir_bytes(dst) / dir_bytes(src), "x",
                  "{:.2f}")
    table.ratio("lerobot", "import CPU a frame: video / exact", cpu["video"] / cpu["exact"], "(shown)", True)
    passthrough(table, tmp, h, w, n if smoke else 300)  # 601 frames: the import's fixed costs (~1 s) amortised


def passthrough(table: Table, tmp: Path, h: int, w: int, n: int) -> None:
    """The pass-through rows (see the module docstring)."""
    from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset

    spec = Spec([n, n + 1], fps=30, cameras={"observation.images.top": Camera(h, w, codec="libsvtav1", gop=2)},
                episodes_per_file=2, state_dim=14)
    src = write_dataset(tmp / "lerobot_av1", spec, "v3.0")
    cpu, wall = {}, {}
    for name, frames, video in (("passthrough", "exact", "passthrough"), ("webp", "webp", "reencode"),
                                ("exact", "exact", "reencode")):
        dst = tmp / f"lerobot_av1_{name}.zarr"
        r = _import(src, dst, frames, video)
        if not r["ok"]:
            raise RuntimeError(f"the LeRobot pass-through benchmark import ({name}) failed its verification")
        cpu[name], wall[name] = r["cpu"] / r["steps"] * 1e3, r["seconds"] / r["steps"] * 1e3
        table.add("lerobot", f"AV1 g2 {h}x{w}: import CPU a frame, {name}", cpu[name], "ms", "{:.1f}")
        table.add("lerobot", f"AV1 g2 {h}x{w}: import wall time a frame, {name}", wall[name], "ms", "{:.1f}")
        table.add("lerobot", f"AV1 g2 {h}x{w}: store bytes / the source's, {name}", dir_bytes(dst) / dir_bytes(src),
                  "x", "{:.2f}")
    for what, v in (("CPU", cpu), ("wall time", wall)):
        r = v["webp"] / v["passthrough"]
        table.ratio("lerobot", f"import {what} a frame: decode-and-WebP / pass-through", r, ">= 20", r >= 20)
