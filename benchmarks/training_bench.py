"""Training throughput on Push-T: what a training loop gets per second, and what it costs.

Same windows everywhere (diffusion_policy's Push-T setting: 2 image frames, 2 states, 16 actions,
``pad_before=1, pad_after=7``), batches of 64 from one fixed random order:

* ``sample_batch`` — ``WindowSampler.sample_batch`` alone, the ceiling;
* DataLoader, 0 and 2 workers — ``WindowDataset`` + ``collate`` (one ``sample_batch`` per batch,
  handed on unsplit), images (64, 2, 96, 96, 3);
* ``SequenceSampler.sample_batch`` alone — the same windows as 16-slot windows (diffusion_policy's
  ``key_first_k``: 14 image slots unread, filled), the ceiling of ``SequenceDataset``;
* torch defaults — ``WindowDataset`` and ``SequenceDataset`` under torch's
  ``default_collate``, 0 and 2 workers: what ``DataLoader(ds, batch_size=64, shuffle=True)`` runs
  (the batch is still read whole by ``__getitems__``; its per-sample rows are
  :class:`~replaybuf_core.torch.rows.BatchRow` views that ``default_collate``'s ``torch.stack`` turns
  back into the batch without a copy — before them this path ran at 0.02–0.05× of ``sample_batch``);
* video reference — the same two frames per sample decoded with PyAV from per-episode mp4s of the
  Push-T frames (H.264, and AV1 as LeRobot encodes them: ``g=2``, ``crf=30``, yuv420p), seeking to
  the keyframe before the first frame: what a video-backed loader pays per sample (frames only).

Every way reads the store with no LRU of decoded chunks (``cache_bytes = 0``; the OS page cache is
warm), so each decodes what it reads and none profits from another's cache.  Rounds alternate the
loaders; per loader the median and the slowest round are shown.  CPU ms per
sample is user + system time of the process and its workers and minor page faults per sample, both
from ``/proc/<pid>/stat``, counted after the first two batches (worker start-up is not throughput);
peak PSS of the process tree is polled from ``/proc/*/smaps_rollup``.
Index rows: :class:`WindowIndex` built on synthetic ``episode_ends`` of 100 k episodes.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import tracemalloc
from fractions import Fraction
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.sampling.window_index import WindowIndex
from replaybuf_core.sampling.window_sampler import WindowSampler

from .common import Table, median_time

BATCH = 64
WARMUP = 2  # batches drained before timing: worker start-up is not throughput
DELTAS = {"img": [-1, 0], "state": [-1, 0], "action": list(range(-1, 15))}
PADS = dict(pad_before=1, pad_after=7)


# ------------------------------------------------------------------------------ measuring
def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


class _PeakPss:
    """Polls the PSS of this process and its descendants every 50 ms; ``peak_mb`` after exit."""

    def __enter__(self):
        self.peak_kb, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, sum(_pss_kb(p) for p in _tree(os.getpid())))
            self._stop.wait(0.05)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak_mb = self.peak_kb / 1024


_TICK = os.sysconf("SC_CLK_TCK")


def _tree_usage() -> tuple[float, float, int]:
    """(user s, system s, minor faults) summed over this process and its live descendants, from
    ``/proc/<pid>/stat`` — DataLoader workers included while they run."""
    user = system = faults = 0
    for pid in _tree(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        faults += int(fields[7])
        user += int(fields[11])
        system += int(fields[12])
    return user / _TICK, system / _TICK, faults


def _measure(batches, n_batches: int) -> dict:
    """Time batches ``WARMUP .. n_batches - 1`` of the iterator ``batches`` (workers started and
    store opened before; workers still alive after, so their CPU counts): samples/s, CPU ms (user,
    system) and minor faults per sample of the process tree."""
    for _ in range(WARMUP):
        next(batches)
    timed = n_batches - WARMUP - 1
    u0, s0, f0 = _tree_usage()
    t = time.perf_counter()
    for _ in range(timed):
        next(batches)
    wall = time.perf_counter() - t
    u1, s1, f1 = _tree_usage()
    for _ in batches:  # the last one: workers shut down after it
        pass
    n = BATCH * timed
    return {"rate": n / wall, "user_ms": (u1 - u0) * 1e3 / n, "sys_ms": (s1 - s0) * 1e3 / n,
            "minflt": (f1 - f0) / n}


# ------------------------------------------------------------------------------ loaders
def _loader(ds, order: np.ndarray, workers: int, collate_fn):
    import torch.utils.data

    batches = [order[i: i + BATCH].tolist() for i in range(0, len(order), BATCH)]
    return iter(torch.utils.data.DataLoader(ds, batch_sampler=batches, num_workers=workers, collate_fn=collate_fn))


def _video_reference(store: Path, tmp: Path, codec: str, n_episodes: int, n_samples: int) -> dict:
    """Encode the img frames of the first episodes per episode, then decode 2 frames per sample."""
    import av

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only, not its banner per encoder
    rb = ReplayBuffer.create_from_path(store)
    ends = np.asarray(rb.episode_ends[:])[:n_episodes]
    starts = np.concatenate([[0], ends[:-1]])
    fps = 10
    paths = []
    for e in range(n_episodes):
        frames = rb.read_rows("img", np.arange(int(starts[e]), int(ends[e])), dtypes="stored")  # uint8 for the encoder
        path = tmp / f"ep{e}_{codec}.mp4"
        with av.open(str(path), "w") as c:
            s = c.add_stream(codec, rate=fps)
            s.width, s.height, s.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
            s.options = {"g": "2", "crf": "30", **({"preset": "12"} if codec == "libsvtav1" else {})}
            for f in frames:
                for pkt in s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
                    c.mux(pkt)
            for pkt in s.encode():
                c.mux(pkt)
        paths.append(path)
    rng = np.random.default_rng(1)
    eps = rng.integers(0, n_episodes, n_samples)
    ts = [int(rng.integers(0, int(ends[e] - starts[e]))) for e in eps]

    def decode_all():
        for e, t in zip(eps, ts):
            want = {max(t - 1, 0), t}
            got = 0
            with av.open(str(paths[e])) as c:
                s = c.streams.video[0]
                c.seek(int(Fraction(min(want), fps) / s.time_base), stream=s, backward=True, any_frame=False)
                for frame in c.decode(s):
                    idx = round(float(frame.time) * fps)
                    if idx in want:
                        frame.to_ndarray(format="rgb24")
                        got += 1
                    if idx >= t:
                        break
            assert got == len(want), (e, t, got)

    u0, s0, f0 = _tree_usage()
    t = time.perf_counter()
    decode_all()
    wall = time.perf_counter() - t
    u1, s1, f1 = _tree_usage()
    return {"rate": n_samples / wall, "user_ms": (u1 - u0) * 1e3 / n_samples,
            "sys_ms": (s1 - s0) * 1e3 / n_samples, "minflt": (f1 - f0) / n_samples}


class _TableSampler(SequenceSampler):
    """diffusion_policy's way: window rows looked up in the 32-bytes-per-window table."""

    def window_rows(self, indices):
        return self.indices[self.window_index.normalize(indices)]


def _open_uncached(path: str) -> ReplayBuffer:
    """The store with no LRU of decoded chunks: every way below decodes what it reads."""
    rb = ReplayBuffer.create_from_path(path)
    rb.cache_bytes = 0
    return rb


def run(table: Table, store: Path, tmp: Path, smoke: bool) -> None:
    """The training section on the imported Push-T ``store`` (see the module docstring)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        table.add("training", "skipped: torch is not installed (pip install torch)", 0, "")
        index_rows(table, smoke)
        return
    from torch.utils.data import default_collate

    from replaybuf_core.torch import SequenceDataset, WindowDataset, collate

    import functools

    rb = _open_uncached(str(store))
    opener = functools.partial(_open_uncached, str(store))
    n_rounds, n_batches = (1, 5) if smoke else (5, 40)
    sampler = WindowSampler(rb, DELTAS, keys=list(DELTAS), dtypes="stored", **PADS)  # as the datasets read
    rng = np.random.default_rng(0)
    orders = [rng.permutation(len(sampler))[: n_batches * BATCH] for _ in range(n_rounds)]

    new = WindowDataset(opener, DELTAS, keys=list(DELTAS), **PADS)
    old = SequenceDataset(opener, 16, keys=["img", "state", "action"], key_first_k={"img": 2, "state": 2}, **PADS)
    assert len(new) == len(old) == len(sampler)
    b = new.__getitems__(orders[0][:BATCH].tolist()).data  # the same windows from every path
    o = default_collate(old.__getitems__(orders[0][:BATCH].tolist()))
    np.testing.assert_array_equal(b["img"].numpy(), o["img"][:, :2].numpy())
    np.testing.assert_array_equal(b["action"].numpy(), o["action"].numpy())
    new._sampler = old._sampler = None  # the main process keeps no open store for the workers

    def batches_of(order):
        return [order[i: i + BATCH] for i in range(0, len(order), BATCH)]

    seq_sampler = SequenceSampler(rb, 16, keys=["img", "state", "action"], key_first_k={"img": 2, "state": 2},
                                  dtypes="stored", **PADS)
    ways = {
        "sample_batch alone": lambda order: (sampler.sample_batch(x) for x in batches_of(order)),
        "SequenceSampler.sample_batch alone (16-slot windows)": lambda order: (seq_sampler.sample_batch(x)
                                                                               for x in batches_of(order)),
        "DataLoader, 0 workers (WindowDataset + collate)": lambda order: _loader(new, order, 0, collate),
        "DataLoader, 2 workers": lambda order: _loader(new, order, 2, collate),
        "torch defaults: SequenceDataset + default_collate, 0 workers": lambda order: _loader(old, order, 0,
                                                                                               default_collate),
        "torch defaults, 2 workers": lambda order: _loader(old, order, 2, default_collate),
        "torch defaults: WindowDataset + default_collate, 0 workers": lambda order: _loader(new, order, 0,
                                                                                             default_collate),
        "torch defaults: WindowDataset, 2 workers": lambda order: _loader(new, order, 2, default_collate),
    }
    results: dict[str, list[dict]] = {k: [] for k in ways}
    peaks: dict[str, float] = {}
    sampler.sample_batch(orders[0][:BATCH])  # open descriptors, shard indexes
    for r in range(n_rounds):
        for name, fn in ways.items():
            with _PeakPss() as pss:
                results[name].append(_measure(fn(orders[r]), n_batches))
            peaks[name] = max(peaks.get(name, 0.0), pss.peak_mb)

    def med(name, k):
        return statistics.median(x[k] for x in results[name])

    for name in ways:
        table.add("training", f"{name}: samples/s (median)", med(name, "rate"), "1/s", "{:.0f}")
        table.add("training", f"{name}: slowest round", min(x["rate"] for x in results[name]), "1/s", "{:.0f}")
        table.add("training", f"{name}: CPU user+sys per sample",
                  med(name, "user_ms") + med(name, "sys_ms"), "ms", "{:.2f}")
        table.add("training", f"{name}: of which system", med(name, "sys_ms"), "ms", "{:.2f}")
        table.add("training", f"{name}: minor page faults per sample", med(name, "minflt"), "", "{:.0f}")
        table.add("training", f"{name}: peak PSS of the process tree", peaks[name], "MB", "{:.0f}")

    # the O(episodes) index against diffusion_policy's table, end to end: same batches, alternating
    seq = seq_sampler
    tab = _TableSampler(rb, 16, key_first_k={"img": 2, "state": 2}, keys=["img", "state", "action"],
                        dtypes="stored", **PADS)
    t_index, t_table = [], []
    for j, x in enumerate(batches_of(orders[0])[: 4 if smoke else 20]):
        pair = [(t_index, seq), (t_table, tab)]
        for times, s in pair if j % 2 else pair[::-1]:  # who goes first alternates
            times.append(median_time(lambda: s.sample_batch(x), 1))
    ti, tt = statistics.median(t_index), statistics.median(t_table)
    table.add("training", "SequenceSampler.sample_batch, rows from WindowIndex", ti * 1e3, "ms", "{:.2f}")
    table.add("training", "SequenceSampler.sample_batch, rows from the table", tt * 1e3, "ms", "{:.2f}")
    table.ratio("training", "sample_batch time: WindowIndex / table", ti / tt, "<= 1.05", ti / tt <= 1.05)

    n_video = 64 if smoke else 512
    codecs = ["libx264"] if smoke else ["libx264", "libsvtav1"]
    video = {}
    for codec in codecs:
        video[codec] = _video_reference(store, tmp, codec, 2 if smoke else 20, n_video)
        table.add("training", f"video reference ({codec}, 2 frames/sample): samples/s", video[codec]["rate"], "1/s",
                  "{:.0f}")
        table.add("training", f"video reference ({codec}): CPU per sample",
                  video[codec]["user_ms"] + video[codec]["sys_ms"], "ms", "{:.2f}")

    # DataLoader (no workers) against sample_batch batch by batch, who goes first alternating:
    # the machine's speed drifts between rounds, the ratio of neighbours does not
    t_alone, t_loader = [], []
    for r in range(n_rounds):
        it = _loader(new, orders[r], 0, collate)
        for j, x in enumerate(batches_of(orders[r])):
            pair = [(t_alone, lambda: sampler.sample_batch(x)), (t_loader, lambda: next(it))]
            for times, fn in pair if j % 2 else pair[::-1]:
                times.append(median_time(fn, 1))
    r0 = statistics.median(t_alone) / statistics.median(t_loader)
    table.add("training", "sample_batch, paired with the DataLoader's batches", statistics.median(t_alone) * 1e3,
              "ms", "{:.2f}")
    table.add("training", "DataLoader 0 workers, same batches", statistics.median(t_loader) * 1e3, "ms", "{:.2f}")
    table.ratio("training", "DataLoader 0 workers / sample_batch (speed)", r0, ">= 0.9", r0 >= 0.9)
    r2 = med("DataLoader, 2 workers", "rate") / med("DataLoader, 0 workers (WindowDataset + collate)", "rate")
    table.ratio("training", "DataLoader 2 workers / 0 workers", r2, ">= 1.0", r2 >= 1.0)
    for name, zero, two, ceiling in (
            ("SequenceDataset", "torch defaults: SequenceDataset + default_collate, 0 workers",
             "torch defaults, 2 workers", "SequenceSampler.sample_batch alone (16-slot windows)"),
            ("WindowDataset", "torch defaults: WindowDataset + default_collate, 0 workers",
             "torch defaults: WindowDataset, 2 workers", "sample_batch alone")):
        r = med(zero, "rate") / med(ceiling, "rate")
        table.ratio("training", f"torch defaults, {name} 0 workers / its sample_batch (speed)", r, ">= 0.8", r >= 0.8)
        r = med(two, "rate") / med(zero, "rate")
        table.ratio("training", f"torch defaults, {name} 2 workers / 0 workers", r, ">= 0.9", r >= 0.9)
    rv = med("DataLoader, 0 workers (WindowDataset + collate)", "rate") / video[codecs[-1]]["rate"]
    table.ratio("training", f"DataLoader 0 workers / video reference ({codecs[-1]})", rv, "> 1", rv > 1)
    index_rows(table, smoke)


def index_rows(table: Table, smoke: bool) -> None:
    """WindowIndex build time and memory at 10 M / 100 M / 346 M steps in 100 k episodes."""
    n_ep = 100_000
    sizes = [10_000_000] if smoke else [10_000_000, 100_000_000, 346_000_000]
    rng = np.random.default_rng(0)
    for n_steps in sizes:
        lengths = rng.integers(1, 2 * n_steps // n_ep, n_ep)
        ends = np.cumsum(lengths).astype(np.int64)
        tracemalloc.start()
        t = time.perf_counter()
        wi = WindowIndex(ends, -1, 16 - 7)
        dt = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        label = f"{int(ends[-1]) / 1e6:.0f} M steps"
        table.add("training", f"WindowIndex build, {label}, 100 k episodes", dt * 1e3, "ms", "{:.1f}")
        table.add("training", f"WindowIndex peak memory while built, {label}", peak, "MB", "{:.1f}")
        table.add("training", f"the diffusion_policy table would hold, {label}", wi.n_windows * 32 / 2**30, "GB",
                  "{:.2f}")
        if n_steps == sizes[-1]:
            table.ratio("training", f"WindowIndex build at {label}: seconds", dt, "< 0.5", dt < 0.5)
            table.ratio("training", f"WindowIndex build at {label}: MB", peak, "< 50", peak < 50)
        if n_steps == sizes[0]:
            batch = rng.integers(0, wi.n_windows, BATCH)
            from replaybuf_core.sampling.sampler_indices import create_indices

            tab = create_indices(ends, 16, None, pad_before=1, pad_after=7)
            t_tab = median_time(lambda: tab[batch], 200)
            t_idx = median_time(lambda: wi.locate(wi.normalize(batch)), 200)
            table.add("training", f"rows of a batch of 64: table lookup ({label})", t_tab * 1e6, "µs", "{:.1f}")
            table.add("training", "rows of a batch of 64: WindowIndex search", t_idx * 1e6, "µs", "{:.1f}")
            del tab
