"""Training reads on real 640×480 camera video: replaybuf against LeRobot 0.6.1 itself, in one run.

Data: ``shared/data/lerobot_v21_g1_20ep`` — a Unitree G1's head camera, 20 episodes, 6,625 frames,
AV1 (LeRobot's own encoding, GOPs of 2) — and two copies of it re-encoded by
``benchmarks/peer/transcode.py`` as MPEG-4 Part 2 and H.264 (LeRobot datasets in the wild carry all
three).  Each source is imported into our tiers (``exact``, ``fast``, ``compact``, and the source's
own packets, ``--video passthrough``, where its codec goes through); stores and copies are kept in
``$REPLAYBUF_BENCH_CACHE`` (default ``~/.cache/replaybuf-bench``) and reused by later runs.

A sample is what diffusion_policy / LeRobot training asks for: 2 frames (t - 1/fps, t) as float32
CHW in [0, 1], 16 actions (t-1 .. t+14), the state; batches of 64 through a plain
``DataLoader(ds, batch_size=64, shuffle=True, num_workers=W)``.  Readers, each in a process of its
own (``benchmarks/peer``): LeRobot 0.6.1's own ``LeRobotDataset`` (torchcodec) in its venv
(``benchmarks/peer/make_lerobot_venv.sh``; absent: one line says so) with 0 and 2 workers, and with 0
workers and one torch thread (its lowest CPU here: torch's idle OpenMP threads spin otherwise);
ours: the drop-in ``LeRobotDataset`` (0 and 2 workers) and the native ``WindowDataset`` (0 workers;
also in streaming epochs).  CPU-ms per sample = user + system time of the reader and its workers
over the timed batches (``benchmarks/peer/cpu_clock.py``); configurations are interleaved within
each round; the table gives min–max (median) over the rounds.  Streaming epochs are timed over
``STREAMING_BATCHES`` batches after ``STREAMING_WARMUP`` (its buffer of decoded blocks fills first).
Bytes: the camera array on disk per frame against the source's mp4s; PSNR: every 13th frame against
PyAV's decode of the source.

Goals (issue 48), against LeRobot's lowest median CPU-ms/sample on the same source: the compact
store's readers ≤ 1/5 of it; streaming epochs ≤ 1/10; fast ≤ 3 CPU-ms/sample; exact ≤ 12; the native
dataset never slower than the drop-in; first batch ≤ 1 s; imports ≤ 10 CPU-ms a frame;
pass-through ≤ 1.05× the source's bytes.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from .common import Table, dir_bytes
from .peer import lerobot_missing, run_lerobot, run_replaybuf

SECTION = "natural"
CAMERA = "observation.images.cam_high"
_SHARED = (Path(__file__).resolve().parent.parent.parent / "shared" / "data", Path("/work/shared/data"))
G1 = next((p / "lerobot_v21_g1_20ep" for p in _SHARED if (p / "lerobot_v21_g1_20ep").is_dir()),
          _SHARED[0] / "lerobot_v21_g1_20ep")
#: source label -> (transcode codec or None for the original, the tiers imported from it)
SOURCES = {"AV1": (None, ("exact", "fast", "compact", "passthrough")),
           "MPEG-4": ("mpeg4", ("fast", "compact")),
           "H.264": ("h264", ("compact", "passthrough"))}
GOALS = {"compact": 5.0, "streaming": 10.0}
#: streaming epochs: warm-up and timed batches (G1 is 103 batches an epoch; the first ~8 fill the
#: shuffle buffer's blocks and the arenas, a start-up cost reported as its first batch, not per sample)
STREAMING_WARMUP, STREAMING_BATCHES = 8, 12


def cache_dir() -> Path:
    return Path(os.environ.get("REPLAYBUF_BENCH_CACHE") or Path.home() / ".cache" / "replaybuf-bench") / SECTION


def _source(label: str, smoke: bool) -> Path:
    codec = SOURCES[label][0]
    if codec is None:
        return G1
    dest = cache_dir() / f"g1_{codec}"
    if not (dest / "meta" / "info.json").is_file():
        from .peer.transcode import transcode

        dest.parent.mkdir(parents=True, exist_ok=True)
        transcode(G1, dest, codec)
    return dest


def _store(label: str, tier: str, src: Path, episodes: list[int] | None) -> tuple[Path, dict]:
    """The store of ``tier`` imported from ``src`` (cached), and its import's numbers."""
    from replaybuf_core.importing import import_dataset

    tag = "all" if episodes is None else f"ep{episodes[0]}-{episodes[-1]}"
    dst = cache_dir() / f"{label.replace('.', '').replace('-', '').lower()}_{tier}_{tag}.zarr"
    record = dst.with_suffix(".json")
    if dst.is_dir() and record.is_file():
        return dst, json.loads(record.read_text())
    options = {"video": "passthrough"} if tier == "passthrough" else {}
    kwargs = {} if tier == "passthrough" else {"frames": tier}
    t0, w0 = os.times(), time.perf_counter()
    report = import_dataset(src, dst, "lerobot", format_options=options, episodes=episodes, progress=False,
                            overwrite=True, **kwargs)
    t1 = os.times()
    from replaybuf_core import ReplayBuffer

    frames = ReplayBuffer.create_from_path(dst).n_steps
    handled = getattr(report, "frame_handling", {}) or {}
    info = {"frames": frames, "import_cpu_ms_per_frame": 1e3 * ((t1.user - t0.user) + (t1.system - t0.system)) / frames,
            "import_wall_s": time.perf_counter() - w0, "handling": str(handled.get(CAMERA, ""))}
    record.write_text(json.dumps(info))
    return dst, info


def _source_frames(src: Path, episodes: list[int] | None, rows: np.ndarray) -> np.ndarray:
    """PyAV's RGB decode of the source's camera at store rows ``rows`` (episodes in order)."""
    import av

    from replaybuf_core.layout.video_frames import rgb24

    info = json.loads((src / "meta" / "info.json").read_text())
    eps = episodes if episodes is not None else list(range(info["total_episodes"]))
    want, out, start = set(rows.tolist()), {}, 0
    for e in eps:
        path = src / info["video_path"].format(episode_chunk=e // info["chunks_size"], video_key=CAMERA,
                                                episode_index=e)
        with av.open(str(path)) as c:
            for i, f in enumerate(c.decode(video=0)):
                if start + i in want:
                    out[start + i] = rgb24(f)
            start += i + 1
    return np.stack([out[r] for r in rows.tolist()])


def _psnr(store: Path, reference: np.ndarray, rows: np.ndarray) -> float:
    from replaybuf_core import ReplayBuffer

    got = ReplayBuffer.create_from_path(store).read_rows(CAMERA, rows).astype(np.float64)
    mse = float(np.mean((got - reference) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def _video_bytes(src: Path, episodes: list[int] | None) -> int:
    info = json.loads((src / "meta" / "info.json").read_text())
    eps = episodes if episodes is not None else range(info["total_episodes"])
    return sum((src / info["video_path"].format(episode_chunk=e // info["chunks_size"], video_key=CAMERA,
                                                episode_index=e)).stat().st_size for e in eps)


def _span(values: list[float], fmt: str = "{:.1f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(min(values))}–{fmt.format(max(values))} ({fmt.format(statistics.median(values))})"


def run(table: Table, tmp: Path, smoke: bool, sources: list[str] | None = None) -> None:
    """Build (or reuse) the stores, read them beside LeRobot in interleaved rounds, print the table
    and add its goals to ``table``.  ``sources``: labels of :data:`SOURCES` to run (default all)."""
    if not (G1 / "meta" / "info.json").is_file():
        table.add(SECTION, f"skipped: no G1 data at {G1}", 0, "")
        return
    try:
        import av  # noqa: F401  (the readers need them)
        import torch  # noqa: F401
    except ImportError as exc:
        table.add(SECTION, f"skipped: {exc.name} is not installed", 0, "")
        return
    episodes = [0, 1] if smoke else None
    labels = ["AV1"] if smoke else list(sources or SOURCES)
    rounds, batches = (1, 1) if smoke else (3, 6)
    stores: dict[tuple[str, str], tuple[Path, dict]] = {}
    sources: dict[str, Path] = {}
    for label in labels:
        sources[label] = src = _source(label, smoke)
        for tier in (("fast", "compact") if smoke else SOURCES[label][1]):
            stores[label, tier] = _store(label, tier, src, episodes)
    rows = np.arange(0, next(iter(stores.values()))[1]["frames"], 13)
    quality = {}
    for label in labels:
        ref = _source_frames(sources[label], episodes, rows)
        src_bytes = _video_bytes(sources[label], episodes)
        for (lab, tier), (path, info) in stores.items():
            if lab == label:
                cam = dir_bytes(path / "data" / CAMERA)
                quality[lab, tier] = (cam / src_bytes, _psnr(path, ref, rows), cam / info["frames"] / 1e3)

    readers: list[tuple[str, str, str, dict]] = []  # (source, what, reader, kwargs)
    peer_missing = lerobot_missing()
    for label in labels:
        if peer_missing is None and not smoke:
            for w, threads in ((0, None), (0, 1), (2, None)):
                name = f"LeRobot 0.6.1 w{w}" + (" 1 thread" if threads else "")
                readers.append((label, "(its mp4)", name, {"peer": True, "workers": w, "torch_threads": threads}))
        for (lab, tier), _ in stores.items():
            if lab != label:
                continue
            readers.append((label, tier, "drop-in w0", {"dataset": "lerobot", "workers": 0}))
            if not smoke:
                readers.append((label, tier, "drop-in w2", {"dataset": "lerobot", "workers": 2}))
            readers.append((label, tier, "native w0", {"dataset": "window", "workers": 0}))
            if tier == "compact":
                readers.append((label, tier, "native streaming w0", {"dataset": "window", "workers": 0,
                                                                        "streaming": True}))
    results: dict[tuple[str, str, str], list[dict]] = {r[:3]: [] for r in readers}
    for r in range(rounds):
        for label, tier, name, kw in readers:
            kw = dict(kw)
            if kw.pop("peer", False):
                got = run_lerobot(sources[label], CAMERA, kw["workers"], batches, r,
                                  torch_threads=kw["torch_threads"])
            else:
                streaming = kw.get("streaming", False)
                # streaming epochs warm up longer: its buffer's blocks (4 × 132 MB of frames on G1) and
                # their arena are new pages until the buffer has turned over once (an epoch's start)
                got = run_replaybuf(stores[label, tier][0], CAMERA, kw["workers"],
                                    max(batches, STREAMING_BATCHES) if streaming and not smoke else batches, r,
                                    dataset=kw["dataset"], streaming=streaming,
                                    warmup=STREAMING_WARMUP if streaming and not smoke else 2)
            if got is not None:
                results[label, tier, name].append(got)

    print(f"\nnatural: real 640x480 camera (G1, {'2 episodes' if smoke else '20 episodes, 6,625 frames'}), "
          f"2 frames + 16 actions a sample, batch 64, {batches} timed batches, {rounds} round(s); min–max (median)")
    if peer_missing:
        print(f"  {peer_missing}")
    head = (f"{'source':<7} {'store':<12} {'reader':<22} {'bytes vs mp4':>12} {'KB/frame':>8} {'PSNR dB':>8} "
            f"{'import ms/f':>11}  {'CPU-ms/sample':<20} {'sys':<16} {'samples/s':<22} first batch s")
    print(head)
    for (label, tier, name), got in results.items():
        q = quality.get((label, tier))
        info = stores[label, tier][1] if (label, tier) in stores else None
        imp = f"{info['import_cpu_ms_per_frame']:.1f}" if info else ""
        print(f"{label:<7} {tier:<12} {name:<22} {f'{q[0]:.2f}x' if q else '':>12} {f'{q[2]:.1f}' if q else '':>8} "
              f"{f'{q[1]:.1f}' if q else '':>8} {imp:>11}  "
              f"{_span([g['cpu_ms_per_sample'] for g in got]):<20} {_span([g['cpu_sys_ms_per_sample'] for g in got]):<16} "
              f"{_span([g['samples_per_s'] for g in got]):<22} {_span([g['first_batch_s'] for g in got], '{:.2f}')}")
    _goals(table, results, quality, stores, labels)


def _median(results: dict, key: tuple[str, str, str]) -> float | None:
    got = results.get(key) or []
    return statistics.median([g["cpu_ms_per_sample"] for g in got]) if got else None


def _goals(table: Table, results: dict, quality: dict, stores: dict, labels: list[str]) -> None:
    for (label, tier, name), got in results.items():
        if got and not name.startswith("LeRobot"):
            table.add(SECTION, f"{label} {tier} {name}: CPU per sample", _median(results, (label, tier, name)), "ms")
    for label in labels:
        peer = [m for (lab, _, name) in results if lab == label and name.startswith("LeRobot")
                if (m := _median(results, (lab, "(its mp4)", name))) is not None]
        best = min(peer) if peer else None
        if best is not None:
            table.add(SECTION, f"{label} LeRobot 0.6.1 lowest median CPU per sample", best, "ms")
            for name in ("drop-in w0", "native w0", "native streaming w0"):
                ours = _median(results, (label, "compact", name))
                if ours is not None:
                    goal = GOALS["streaming" if "streaming" in name else "compact"]
                    table.ratio(SECTION, f"{label} compact {name}: LeRobot's CPU / ours", best / ours,
                                f">= {goal:g}", best / ours >= goal)
        for tier, limit in (("fast", 3.0), ("exact", 12.0)):
            ours = _median(results, (label, tier, "drop-in w0"))
            if ours is not None:
                table.ratio(SECTION, f"{label} {tier} drop-in w0: CPU-ms per sample", ours, f"<= {limit:g}", ours <= limit)
        for (lab, tier), (_, info) in stores.items():
            if lab != label:
                continue
            table.ratio(SECTION, f"{label} {tier} import: CPU-ms a frame", info["import_cpu_ms_per_frame"], "<= 10",
                        info["import_cpu_ms_per_frame"] <= 10)
            native, drop = _median(results, (lab, tier, "native w0")), _median(results, (lab, tier, "drop-in w0"))
            if native and drop:
                table.ratio(SECTION, f"{label} {tier}: drop-in CPU / native CPU", drop / native, ">= 0.95", drop / native >= 0.95)
            if tier == "passthrough" and (lab, tier) in quality:
                table.ratio(SECTION, f"{label} pass-through bytes / source's", quality[lab, tier][0], "<= 1.05",
                            quality[lab, tier][0] <= 1.05)
            if tier == "compact" and (lab, tier) in quality:
                b, psnr, _ = quality[lab, tier]
                table.ratio(SECTION, f"{label} compact bytes / source's", b, "<= 1.2", b <= 1.2)
                table.ratio(SECTION, f"{label} compact PSNR vs the source's decode", psnr, ">= 40 dB", psnr >= 40)
    firsts = [g["first_batch_s"] for (_, _, name), got in results.items() if not name.startswith("LeRobot") for g in got]
    if firsts:
        table.ratio(SECTION, "our first batch, slowest (s)", max(firsts), "<= 1", max(firsts) <= 1)


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.natural_training_bench [--smoke]``: this section alone."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--sources", nargs="+", choices=list(SOURCES), help="source codecs to run (default: all)")
    args = p.parse_args(argv)
    table = Table()
    with tempfile.TemporaryDirectory(prefix="replaybuf-natural-") as tmp:
        run(table, Path(tmp), args.smoke, args.sources)
    print(table.render())


if __name__ == "__main__":
    main()
