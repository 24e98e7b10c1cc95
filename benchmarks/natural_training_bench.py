"""Training reads on natural 640×480 camera frames: our store (fast, exact and video frame codecs)
against a LeRobot-style video reader, side by side in one run.

Data: 640×480 mosaics of the GR00T sample's natural frames (``frames_bench.natural_frames``:
consecutive times, so a video encoder sees real motion), cut into episodes, with 7-dim float32
actions.  Each sample is what diffusion_policy / LeRobot training asks for: 2 frames (t-1, t) and 16
actions (t-1 .. t+14), as float32 channels-first images in [0, 1] (LeRobot's output), batches of 64
in one random order, 2 cores.

* ours — ``WindowDataset(..., channels_first=True, float_images=True)`` under a DataLoader with
  ``collate_fn=collate``, 0 and 2 workers, on a store written by ``rb.writer(frames=...)``;
* LeRobot-style reader — the stand-in for LeRobot 0.6.1 (which needs Python ≥ 3.12 and torch < 2.12,
  not a CI dependency): the frames encoded per episode as LeRobot encodes them (AV1 via SVT-AV1,
  ``g=2``, ``crf=30``, yuv420p; the smoke run uses H.264 to stay fast), decoded per sample with PyAV
  after a seek to the keyframe before the first frame, actions from memory, under a DataLoader with
  torch's default collate and 0 / 2 workers; its best setting is the reference (as LeRobot's was:
  72.5 samples/s with 2 workers measured on this machine).

The float conversion's share of a batch: ``convert_images`` on a batch ``sample_batch`` read, over the
time the 0-worker DataLoader takes for a batch (median of the rounds), beside its floor — filling a
new float32 array of the batch's shape once on 2 threads (a 64 × 2 × 3 × 480 × 640 batch is 472 MB:
memory bandwidth, not the division, bounds it).
Bytes and quality: the camera array's bytes a frame on disk for every tier, and the PSNR against the
source frames of each lossy one (fast, video) and of the LeRobot-style mp4s (decoded whole with PyAV).
Goals (issue 29): fast tier ≥ 5× the reference's best samples/s; float conversion ≤ 10 % of a batch.
Goals (issue 30): the video tier ≤ 1.0× the LeRobot-style AV1 mp4s' bytes at an equal or better PSNR
(full run; the smoke run's reference is H.264, so its byte goal is only shown), and ≥ 2× the
reference's best samples/s.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer

from .common import Table, dir_bytes
from .frames_bench import GR00T, _psnr, natural_frames
from .training_bench import BATCH, _loader, _measure

IMAGE, ACTION = "observation.image", "action"
DELTAS = {IMAGE: [-1, 0], ACTION: list(range(-1, 15))}
FPS = 20


def _episodes(n_episodes: int, length: int) -> list[dict[str, np.ndarray]]:
    got = natural_frames(n_episodes * length, 1)
    if got is None:
        return []
    big = got[1]
    rng = np.random.default_rng(0)
    return [{IMAGE: big[e * length: (e + 1) * length], ACTION: rng.random((length, 7), dtype=np.float32)}
            for e in range(n_episodes)]


def _write_store(path: Path, episodes: list[dict], frames: str) -> Path:
    rb = ReplayBuffer.create_empty("zarr", path)
    with rb.writer(frames=frames) as w:
        for ep in episodes:
            w.add_episode(ep)
    rb.close()
    return path


def _open_uncached(path: str) -> ReplayBuffer:
    rb = ReplayBuffer.create_from_path(path)
    rb.cache_bytes = 0  # every read decodes: no LRU of decoded chunks across samples
    return rb


def _encode_videos(tmp: Path, episodes: list[dict], codec: str) -> list[Path]:
    import av

    os.environ.setdefault("SVT_LOG", "1")
    paths = []
    for e, ep in enumerate(episodes):
        path = tmp / f"natural_ep{e}_{codec}.mp4"
        with av.open(str(path), "w") as c:
            s = c.add_stream(codec, rate=FPS)
            s.width, s.height, s.pix_fmt = ep[IMAGE].shape[2], ep[IMAGE].shape[1], "yuv420p"
            s.options = {"g": "2", "crf": "30", **({"preset": "12"} if codec == "libsvtav1" else {})}
            for f in ep[IMAGE]:
                for pkt in s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
                    c.mux(pkt)
            for pkt in s.encode():
                c.mux(pkt)
        paths.append(path)
    return paths


def _decode_all(path: Path) -> np.ndarray:
    import av

    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


class VideoWindows:
    """The LeRobot-style map-style dataset: item = (2 frames float32 (2, 3, H, W) in [0, 1], 16
    actions (16, 7)), frames decoded with PyAV from the episode's mp4 per item (indices clamped to
    the episode, as LeRobot pads)."""

    def __init__(self, paths: list[Path], actions: list[np.ndarray]):
        self.paths = [str(p) for p in paths]
        self.actions = actions
        lengths = [len(a) for a in actions]
        self.items = [(e, t) for e, n in enumerate(lengths) for t in range(n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        import av
        import torch

        e, t = self.items[i]
        n = len(self.actions[e])
        want = [max(t - 1, 0), t]
        frames: dict[int, np.ndarray] = {}
        with av.open(self.paths[e]) as c:
            s = c.streams.video[0]
            c.seek(int(Fraction(want[0], FPS) / s.time_base), stream=s, backward=True, any_frame=False)
            for frame in c.decode(s):
                idx = round(float(frame.time) * FPS)
                if idx in want:
                    frames[idx] = frame.to_ndarray(format="rgb24")
                if idx >= t:
                    break
        img = torch.from_numpy(np.stack([frames[k] for k in want])).permute(0, 3, 1, 2).float() / 255
        rows = np.clip(np.arange(t - 1, t + 15), 0, n - 1)
        return {IMAGE: img, ACTION: torch.from_numpy(self.actions[e][rows])}


def run(table: Table, tmp: Path, smoke: bool) -> None:
    try:
        import av  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        table.add("natural", "skipped: needs torch and PyAV", 0, "")
        return
    from torch.utils.data import default_collate

    from replaybuf_core.sampling.window_sampler import WindowSampler
    from replaybuf_core.torch import WindowDataset, collate
    from replaybuf_core.torch.batch import convert_images

    n_episodes, length = (2, 24) if smoke else (6, 50)
    episodes = _episodes(n_episodes, length)
    if not episodes:
        table.add("natural", f"skipped: no PyAV or no {GR00T}", 0, "")
        return
    n_rounds, n_batches = (1, 4) if smoke else (3, 10)
    tiers = ("fast", "exact", "video")
    stores = {name: _write_store(tmp / f"natural_{name}.zarr", episodes, name) for name in tiers}
    codec = "libx264" if smoke else "libsvtav1"
    video = VideoWindows(_encode_videos(tmp, episodes, codec), [ep[ACTION] for ep in episodes])
    n_frames = n_episodes * length
    mp4_kb = sum(os.path.getsize(p) for p in video.paths) / n_frames / 1e3
    source = np.concatenate([ep[IMAGE] for ep in episodes])
    mp4_db = _psnr(source, np.concatenate([_decode_all(p) for p in video.paths]))
    table.add("natural", f"LeRobot-style {codec} mp4: KB a frame ({mp4_db:.1f} dB)", mp4_kb, "KB", "{:.1f}")
    kb, db = {}, {}
    for name, p in stores.items():
        kb[name] = dir_bytes(p / "data" / IMAGE) / n_frames / 1e3
        db[name] = _psnr(source, ReplayBuffer.create_from_path(p)[IMAGE][:])
        q = "exact" if db[name] == float("inf") else f"{db[name]:.1f} dB"
        table.add("natural", f"{name} store: camera KB a frame ({q})", kb[name], "KB", "{:.1f}")
    r = kb["video"] / mp4_kb
    table.ratio("natural", f"video store bytes / LeRobot-style {codec} mp4 bytes", r, "<= 1.0",
                (r <= 1.0) if not smoke else True)
    table.ratio("natural", f"video store PSNR - LeRobot-style {codec} mp4 PSNR (dB)", db["video"] - mp4_db,
                ">= 0", db["video"] >= mp4_db)

    datasets = {name: WindowDataset(functools.partial(_open_uncached, str(p)), DELTAS, keys=list(DELTAS),
                                    channels_first=True, float_images=True, pad_before=1, pad_after=7)
                for name, p in stores.items()}
    rng = np.random.default_rng(0)
    ways = {}
    for name, ds in datasets.items():
        ways[f"{name} store, 0 workers"] = (ds, 0, collate)
        ways[f"{name} store, 2 workers"] = (ds, 2, collate)
    ways[f"LeRobot-style {codec} reader, 0 workers"] = (video, 0, default_collate)
    ways[f"LeRobot-style {codec} reader, 2 workers"] = (video, 2, default_collate)
    rates: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(n_rounds):
        for name, (ds, workers, fn) in ways.items():
            order = rng.permutation(len(ds))
            order = np.resize(order, n_batches * BATCH)  # small smoke data: the order repeats
            m = _measure(_loader(ds, order, workers, fn), n_batches)
            rates[name].append(m["rate"])
            cpu[name].append(m["user_ms"] + m["sys_ms"])
    for name in ways:
        table.add("natural", f"{name}: samples/s (median)", statistics.median(rates[name]), "1/s", "{:.1f}")
        table.add("natural", f"{name}: CPU per sample", statistics.median(cpu[name]), "ms", "{:.1f}")
    best_ref = max(statistics.median(rates[k]) for k in ways if k.startswith("LeRobot"))
    goals = {"fast": 5, "video": 2}
    for name in tiers:
        best = max(statistics.median(rates[f"{name} store, {w} workers"]) for w in (0, 2))
        goal = goals.get(name)
        table.ratio("natural", f"{name} store best / LeRobot-style reader best (samples/s)", best / best_ref,
                    f">= {goal}" if goal else "(no goal)", best / best_ref >= goal if goal else True)

    # the float conversion's share of a batch (fast store, 0 workers)
    rb = _open_uncached(str(stores["fast"]))
    sampler = WindowSampler(rb, DELTAS, keys=list(DELTAS), pad_before=1, pad_after=7)
    batch = sampler.sample_batch(np.arange(BATCH) % len(sampler))
    times = []
    for _ in range(3 if smoke else 7):
        b = {IMAGE: batch[IMAGE].copy()}
        t = time.perf_counter()
        convert_images(b, [IMAGE], channels_first=True, to_float=True)
        times.append(time.perf_counter() - t)
    t_convert = statistics.median(times)
    floor = []
    for _ in range(3 if smoke else 7):  # the floor: writing the float32 batch's bytes once, 2 threads
        t = time.perf_counter()
        out = np.empty(batch[IMAGE].shape, np.float32)
        halves = np.array_split(out, 2)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda h: h.fill(0.5), halves))
        floor.append(time.perf_counter() - t)
        del out, halves
    t_batch = BATCH / statistics.median(rates["fast store, 0 workers"])
    table.add("natural", "float + channels-first conversion of a batch", t_convert * 1e3, "ms", "{:.1f}")
    table.add("natural", "the floor: filling a new float32 batch once (2 threads)", statistics.median(floor) * 1e3,
              "ms", "{:.1f}")
    table.ratio("natural", "conversion / a 0-worker batch (fast store)", t_convert / t_batch, "<= 0.10",
                t_convert / t_batch <= 0.10)
