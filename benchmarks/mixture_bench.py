"""Mixtures of stores (issue 49), side by side in one run.

* **Weighted throughput**: a mixture of Push-T (diffusion-policy, 10 fps, 96×96 frames), the G1
  humanoid data (LeRobot v2.1, 30 fps, 640×480 AV1 frames kept pass-through) and the LeRobot v3
  fixture (15 fps, two small cameras), each imported; state and action padded to 26 dims, each
  store's camera its own key (filled for the others), ``delta_timestamps`` in seconds at each store's
  fps (actions 0..1.4 s every 0.2 s, states -0.2 and 0 s, frames at 0 s).  Each store alone is its
  ``WindowSampler.sample_batch`` on the same keys and offsets; the mixture's expected rate is the
  weighted harmonic mean ``1 / sum(p_s / rate_s)`` of those, ``p_s`` its shares (weights 1 : 1 : 1);
  the ratio is what ``Mixture.sample_batch`` reaches against it.  Batches of 32, one
  process; each round times 4 batches of every configuration, in an order that turns from round to
  round.  The ratio is taken within each round, over the samples the mixture's batches drew: the
  time each store alone (its batches of 32, that round) takes for as many samples as the mixture
  drew from it, over the mixture's time — the nominal shares' expectation without the binomial
  spread of 4 batches (median and range over 16 rounds).  The goal (>= 0.9) is read on the
  training path: ``MixtureDataset(mix, 32)`` iterated as a training loop does (0 workers, its
  default prefetch), against each store alone read the same way (a one-store mixture), ratio per
  round over the draws likewise.  One ``sample_batch`` call cannot overlap the last decode of its
  ~11 G1 windows with anything (the stores alone overlap theirs every 32); a loader overlaps it with
  the next batch, so that ratio is printed as information.  CPU-ms a sample (user + sys of the
  process, its decode threads included) is printed beside samples/s.  A full garbage collection
  runs before the timed rounds (and ``gc.freeze`` keeps the set-up's objects out of later ones), so
  that no configuration's round carries the ~130 ms one full collection takes here.
* **Object storage**: Push-T in a bucket (moto's server) behind a proxy adding 30 ms to each request:
  the mixture's streaming order (``block=256, span=4``) with the node's local byte cache, a prefetch
  thread and the read-ahead of the next run of blocks, through ``MixtureDataset`` (0 workers), against
  the same over the local store (goal >= 0.8x); requests per batch with and without the block order.
* **Scale**: a metadata-only store of 1 M episodes / 100 M steps (``episode_ends`` and empty
  arrays): the time to resume mid-epoch in a fresh process (open the store, build the window index,
  load a state, read the first batch; goal <= 10 s), that process's peak RSS, and the bytes of index
  and sampler state a rank keeps per episode (tracemalloc, retained; goal <= 100 B).

Anchors (properties, not measured here): MosaicML streaming has elastic determinism, mid-epoch
resume and weighted streams but no episodes or windows; LeRobot's ``MultiLeRobotDataset`` needs one
schema (keys missing somewhere are dropped), no weights, no resume (its streaming dataset resumes
nothing mid-epoch: lerobot #3917).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer
from replaybuf_core.mixture import Mixture, MixtureSource

from .common import PUSHT, Table

G1 = Path("/work/shared/data/lerobot_v21_g1_20ep")
V3 = Path("/work/shared/data/lerobot_v3_synthetic_2cam")
BATCH = 32
ACTION_S = [round(0.2 * i, 1) for i in range(8)]
STATE_S = [-0.2, 0.0]


def metadata_only_store(path: Path, n_episodes: int, n_steps: int, seed: int = 0) -> Path:
    """A zarr store of ``n_episodes`` episodes and ``n_steps`` steps whose data arrays (``state``,
    ``action``: float32 (2,)) hold no chunk (reads give 0): the bookkeeping of a large dataset at
    the cost of its ``episode_ends`` alone."""
    import zarr

    rng = np.random.default_rng(seed)
    lengths = rng.integers(60, 141, n_episodes).astype(np.int64)  # episodes of 60..140 steps, scaled
    lengths = np.maximum(lengths * n_steps // int(lengths.sum()), 1)
    lengths[-1] += n_steps - int(lengths.sum())
    ends = np.cumsum(lengths)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    for key in ("state", "action"):
        root.create_array(f"data/{key}", shape=(n_steps, 2), chunks=(1 << 16, 2), dtype="float32", fill_value=0.0)
    root.create_array("meta/episode_ends", data=ends, chunks=(1 << 20,))
    root["meta"].attrs["replaybuf_commit"] = {"n_episodes": n_episodes, "n_steps": n_steps, "generation": 0}
    root["data"].attrs["fps"] = 10.0
    return path


# ---------------------------------------------------------------------------- scale
_RESUME = r"""
import json, sys, time, resource
t0 = time.perf_counter()
from replaybuf_core.mixture import Mixture, MixtureSource
from replaybuf_core.torch import MixtureDataset, MixtureLoader
path, state = sys.argv[1], json.loads(sys.argv[2])
mix = Mixture([MixtureSource(path)], delta_timestamps={"action": [0.0, 0.1, 0.2, 0.3]}, seed=1)
loader = MixtureLoader(MixtureDataset(mix, 64, rank=0, world_size=1))
loader.load_state_dict(state)
batch = next(iter(loader))
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "first": int(batch["mixture_position"][0])}))
"""


def state_bytes(path: Path, n_episodes: int) -> tuple[int, int]:
    """Bytes retained (tracemalloc) by a rank's mixture, dataset and samplers after a batch (the
    store's decoded-chunk LRU off: it is data, bounded by ``cache_bytes``, not index state), and the
    pickled size of the mixture (what a DataLoader worker is sent)."""
    import pickle

    from replaybuf_core.torch import MixtureDataset

    warm = Mixture([MixtureSource(path, cache_bytes=0)], delta_timestamps={"action": [0.0]})  # modules imported
    warm.sample_batch([0])
    warm.close()
    del warm
    tracemalloc.start()
    mix = Mixture([MixtureSource(path, cache_bytes=0)], delta_timestamps={"action": [0.0, 0.1, 0.2, 0.3]}, seed=1)
    ds = MixtureDataset(mix, 64, rank=0, world_size=1)
    ds.set_position(0, len(mix) // 2)
    batch = mix.sample_batch(ds.positions(0))
    del batch
    retained, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    size = len(pickle.dumps(mix))
    mix.close()
    return retained, size


def scale(table: Table, tmp: Path, smoke: bool) -> None:
    n_ep, n_steps = (200_000, 20_000_000) if smoke else (1_000_000, 100_000_000)  # arrays too big to be pinned
    path = metadata_only_store(tmp / "mixture-scale.zarr", n_ep, n_steps)
    mix = Mixture([MixtureSource(path)], delta_timestamps={"action": [0.0, 0.1, 0.2, 0.3]}, seed=1)
    state = {"mixture": mix.fingerprint, "epoch": 3, "position": n_steps // 2 + 17 * 64, "global_batch_size": 64}
    mix.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    runs = []
    for _ in range(1 if smoke else 3):
        out = subprocess.run([sys.executable, "-c", _RESUME, str(path), json.dumps(state)], env=env,
                             capture_output=True, text=True, timeout=600, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["first"] == state["position"]
    resume = statistics.median(r["seconds"] for r in runs)
    label = f"{n_ep // 1000}k episodes / {n_steps // 1_000_000} M steps"
    table.add("mixture", f"resume mid-epoch in a new process ({label}: import, open, index, first batch)",
              resume, "s", "{:.2f}")
    table.add("mixture", f"peak RSS of that process ({label})", max(r["rss"] for r in runs) / 2**20, "MiB", "{:.0f}")
    retained, pickled = state_bytes(path, n_ep)
    table.add("mixture", f"index + sampler state retained by a rank ({label})", retained / n_ep, "B/episode", "{:.1f}")
    table.add("mixture", "the mixture pickled for a DataLoader worker", pickled / n_ep, "B/episode", "{:.1f}")
    table.ratio("mixture", f"resume time at {label}, s", resume, "<= 10", resume <= 10)
    table.ratio("mixture", "index + sampler state, B/episode/rank", retained / n_ep, "<= 100", retained / n_ep <= 100)


# ---------------------------------------------------------------------------- throughput
def _import_all(tmp: Path, smoke: bool) -> dict[str, Path]:
    from replaybuf_core.importing import import_dataset

    out = {}
    jobs = [("pusht", PUSHT, "diffusion-policy", {"episodes": "0:20" if smoke else None}),
            ("g1", G1, "lerobot", {"format_options": {"video": "passthrough"}, "episodes": "0:2" if smoke else None}),
            ("v3", V3, "lerobot", {})]
    for name, src, fmt, kw in jobs:
        if not Path(src).is_dir():
            continue
        dst = tmp / f"mixture-{name}.zarr"
        options = kw.pop("format_options", None)
        kw = {k: v for k, v in kw.items() if v is not None}
        report = import_dataset(src, dst, fmt, format_options=options, progress=False, overwrite=True, **kw)
        if not report.ok:
            raise RuntimeError(f"the benchmark import of {src} failed its verification")
        out[name] = dst
    return out


#: each store: fps, its keys -> the mixture's
LAYOUT = {
    "pusht": (10.0, {"state": "state", "action": "action", "img": "image.pusht"}),
    "g1": (None, {"observation.state": "state", "action": "action", "observation.images.cam_high": "image.g1"}),
    "v3": (None, {"observation.state": "state", "action": "action", "observation.images.front": "image.front"}),
}


def _mixture(stores: dict[str, Path], weights: dict[str, float] | None = None) -> Mixture:
    sources = []
    for name, path in stores.items():
        fps, keys = LAYOUT[name]
        with ReplayBuffer.create_from_path(path) as rb:
            drop = [k for k in rb.keys() if k not in keys]
        sources.append(MixtureSource(path, name=name, fps=fps, keys={k: v for k, v in keys.items() if k != v},
                                     drop=drop, weight=(weights or {}).get(name, "size")))
    images = {LAYOUT[n][1][k]: {"fill": 0} for n in stores for k in LAYOUT[n][1] if LAYOUT[n][1][k].startswith("image")}
    return Mixture(sources, {"state": {"pad_dims": True}, "action": {"pad_dims": True}, **images},
                   delta_timestamps={"action": ACTION_S, "state": STATE_S, **{k: [0.0] for k in images}},
                   samples_per_epoch=None if weights is None else 4096)


def _alone(mix, s: int):
    """The store's own WindowSampler on the keys and offsets the mixture reads from it."""
    from replaybuf_core.sampling.window_sampler import WindowSampler

    sampler = mix.samplers[s]
    return WindowSampler(sampler.buffer, {k: v.tolist() for k, v in sampler.delta_steps.items()}, keys=sampler.keys,
                         dtypes="stored", window_index=sampler.window_index)


def _timed(fn, calls: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + sys of this process: its decode threads included) of
    ``calls`` calls of ``fn``."""
    import resource

    c, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(calls):
        fn()
    wall, c2 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
    return wall, (c2.ru_utime - c.ru_utime) + (c2.ru_stime - c.ru_stime)


def throughput(table: Table, tmp: Path, smoke: bool) -> None:
    stores = _import_all(tmp, smoke)
    if len(stores) < 3:
        table.add("mixture", "skipped: the G1 / LeRobot v3 data are not in shared/data", 0, "-")
        return
    mix = _mixture(stores, {n: 1.0 for n in stores})
    alone = [_alone(mix, s) for s in range(len(stores))]
    gc.collect()  # the imports' and set-up's garbage: one full collection of ~300 k objects (torch, numba)
    gc.freeze()  # takes ~130 ms, and would land in whichever configuration's round it falls on
    rng = np.random.default_rng(0)
    rounds, calls = (3, 2) if smoke else (16, 4)
    p = mix.order.probabilities
    per = {n: [] for n in stores}  # (wall, cpu) of `calls` batches of BATCH, a round each
    mixed, same, ratios = [], [], []
    drew = np.zeros(len(stores), np.int64)
    position = 0
    for r in range(rounds + 1):  # round 0 warms up; the order of the configurations turns each round
        runs = []
        for s, name in enumerate(stores):
            runs.append((name, lambda s=s: alone[s].sample_batch(rng.integers(0, len(alone[s]), BATCH))))
        positions = [(position + j * BATCH + np.arange(BATCH)) % len(mix) for j in range(calls)]
        position += calls * BATCH
        batches = iter(positions)
        runs.append(("mixture", lambda: mix.sample_batch(next(batches))))
        drawn = [mix.order.locate(0, pos) for pos in positions]
        located = iter(drawn)

        def same_windows():  # the mixture's windows through each store's sampler: the mixture's own cost
            src, win = next(located)
            for s in np.unique(src):
                alone[int(s)].sample_batch(win[src == s])
        runs.append(("same", same_windows))
        got = {}
        for k in range(len(runs)):
            name, fn = runs[(k + r) % len(runs)]
            got[name] = _timed(fn, calls)
        if not r:
            continue
        for name in stores:
            per[name].append(got[name])
        mixed.append(got["mixture"])
        same.append(got["same"])
        # the time the stores alone take for the samples these mixture batches drew (each at its rate this round)
        share = np.bincount(np.concatenate([src for src, _ in drawn]), minlength=len(stores))
        drew += share
        expected = sum(int(share[s]) * got[n][0] / (calls * BATCH) for s, n in enumerate(stores))
        ratios.append(expected / got["mixture"][0])

    def rate(runs):  # samples/s: median and range over the rounds
        v = [calls * BATCH / w for w, _ in runs]
        return statistics.median(v), min(v), max(v)

    def cpu_ms(runs):
        return statistics.median(c / (calls * BATCH) * 1e3 for _, c in runs)

    for s, n in enumerate(stores):
        med, lo, hi = rate(per[n])
        table.add("mixture", f"{n} alone: WindowSampler.sample_batch({BATCH}) (share {p[s]:.2f}); range {lo:.0f}-{hi:.0f}",
                  med, "samples/s", "{:.0f}")
        table.add("mixture", f"{n} alone: CPU per sample (user+sys, decode threads included)", cpu_ms(per[n]),
                  "CPU-ms", "{:.2f}")
    expected = 1 / sum(p[s] / rate(per[n])[0] for s, n in enumerate(stores))
    table.add("mixture", "weighted expectation 1 / sum(p_s / rate_s)", expected, "samples/s", "{:.0f}")
    drawn_shares = ", ".join(f"{n} {drew[s] / drew.sum():.2f}" for s, n in enumerate(stores))
    table.add("mixture", f"the same with the shares the timed mixture batches drew ({drawn_shares})",
              1 / sum(drew[s] / drew.sum() / rate(per[n])[0] for s, n in enumerate(stores)), "samples/s", "{:.0f}")
    table.add("mixture", "weighted CPU per sample of the stores alone", sum(p[s] * cpu_ms(per[n])
              for s, n in enumerate(stores)), "CPU-ms", "{:.2f}")
    med, lo, hi = rate(mixed)
    table.add("mixture", f"the mixture of the three: Mixture.sample_batch({BATCH}); range {lo:.0f}-{hi:.0f}", med,
              "samples/s", "{:.0f}")
    table.add("mixture", "the mixture: CPU per sample", cpu_ms(mixed), "CPU-ms", "{:.2f}")
    ratio = statistics.median(ratios)
    table.ratio("mixture", f"one call: mixture / the stores alone on the batches' draws (rounds: {min(ratios):.2f}-"
                f"{max(ratios):.2f})", ratio, "(informational)", True)
    own = statistics.median(w for w, _ in same) / statistics.median(w for w, _ in mixed)
    table.ratio("mixture", "mixture / its stores' samplers on the same windows (its own cost)", own, "(informational)",
                True)
    _through_datasets(table, stores, mix, smoke)
    gc.unfreeze()
    _bucket(table, stores["pusht"], tmp, smoke)


def _through_datasets(table: Table, stores: dict[str, Path], mix: Mixture, smoke: bool) -> None:
    """The training path: ``MixtureDataset(mix, 32)`` iterated (0 workers, its default prefetch)
    against each store alone read the same way (a mixture of that store only, its own keys)."""
    from replaybuf_core.torch import MixtureDataset

    alone = {n: _mixture({n: p}, {n: 1.0}) for n, p in stores.items()}
    configs = [(n, m) for n, m in alone.items()] + [("mixture", mix)]
    rounds, timed = (2, 3) if smoke else (16, 10)
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n, _ in configs}
    ratios, drew = [], np.zeros(len(stores), np.int64)
    start = {n: 0 for n, _ in configs}
    for r in range(rounds):
        got = {}
        for k in range(len(configs)):
            name, m = configs[(k + r) % len(configs)]
            ds = MixtureDataset(m, BATCH, rank=0, world_size=1)
            ds.set_position(0, start[name] % (len(m) - (timed + 2) * BATCH))
            start[name] += (timed + 2) * BATCH
            it = iter(ds)
            next(it), next(it)  # its prefetch thread running
            sources = []  # (each batch dropped as a training step drops it: its arrays are reused)
            got[name] = _timed(lambda: sources.append(next(it)["source_index"].numpy().copy()), timed)
            it.close()
            if name == "mixture":
                share = np.bincount(np.concatenate(sources), minlength=len(stores))
        for n, _ in configs:
            runs[n].append(got[n])
        drew += share
        expected = sum(int(share[s]) * got[n][0] / (timed * BATCH) for s, n in enumerate(stores))
        ratios.append(expected / got["mixture"][0])
    for n, _ in configs:
        v = [timed * BATCH / w for w, _ in runs[n]]
        cpu = statistics.median(c / (timed * BATCH) * 1e3 for _, c in runs[n])
        label = f"{n} alone (a mixture of it only)" if n != "mixture" else "the mixture of the three"
        table.add("mixture", f"{label}: MixtureDataset({BATCH}) iterated; range {min(v):.0f}-{max(v):.0f}",
                  statistics.median(v), "samples/s", "{:.0f}")
        table.add("mixture", f"{label}: MixtureDataset, CPU per sample", cpu, "CPU-ms", "{:.2f}")
    ratio = statistics.median(ratios)
    table.ratio("mixture", f"training path: mixture / the stores alone on its draws (rounds: {min(ratios):.2f}-"
                f"{max(ratios):.2f})", ratio, ">= 0.9", ratio >= 0.9)


# ---------------------------------------------------------------------------- object storage
def _bucket(table: Table, pusht: Path, tmp: Path, smoke: bool) -> None:
    import importlib.util

    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("obstore") is None:
        table.add("mixture", "object storage skipped: moto[server] / obstore not installed", 0, "-")
        return
    from .latency_proxy import LatencyProxy
    from .object_bench import local_s3

    with local_s3("mixture") as (host, port):
        proxy = LatencyProxy(host, port, 0.0)
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint  # (restored by local_s3)
        try:
            _bucket_runs(table, proxy, pusht, tmp, smoke)
        finally:
            proxy.close()


def _bucket_runs(table: Table, proxy, pusht: Path, tmp: Path, smoke: bool) -> None:
    from replaybuf_core.torch import MixtureDataset

    url = "s3://mixture/pusht.zarr"
    with ReplayBuffer.create_from_path(pusht) as rb:
        rb.save_to_path(url)
    proxy.latency = 0.030
    deltas = {"img": [0.0], "state": STATE_S, "action": ACTION_S}

    def source(loc, **kw):
        return MixtureSource(loc, fps=10.0, drop=["keypoint", "n_contacts"], **kw)

    n_batches = 12 if smoke else 200  # several runs of 4 blocks (1,024 windows: 32 batches each)
    cache_dir = tempfile.mkdtemp(prefix="mixture-node-cache-", dir=tmp)
    cache = {"replaybuf_cache_dir": cache_dir, "replaybuf_cache_bytes": 1 << 30}
    runs = {}
    for label, loc, kw in (("local", pusht, {}), ("s3", url, {"storage_options": cache})):
        mix = Mixture([source(loc, **kw)], delta_timestamps=deltas, block=256, span=4)
        ds = MixtureDataset(mix, BATCH, rank=0, world_size=1, prefetch=1)
        it = iter(ds)
        next(it)  # the first run of blocks is fetched on demand; the next ones are read ahead
        next(it)
        t = time.perf_counter()
        for _ in range(n_batches):
            next(it)
        runs[label] = n_batches * BATCH / (time.perf_counter() - t)
        it.close()
    table.add("mixture", "Push-T local, block order, prefetch (MixtureDataset, 0 workers)", runs["local"],
              "samples/s", "{:.0f}")
    table.add("mixture", "Push-T on S3 +30 ms a request, block order + node cache + prefetch", runs["s3"],
              "samples/s", "{:.0f}")
    table.ratio("mixture", "S3 (30 ms) / local, streaming order", runs["s3"] / runs["local"], ">= 0.8",
                runs["s3"] / runs["local"] >= 0.8)
    for label, kw in (("random order", {}), ("block order (256 x 4)", {"block": 256, "span": 4})):
        mix = Mixture([source(url)], delta_timestamps=deltas, **kw)
        mix.sample_batch(np.arange(BATCH))
        counts = []
        for j in range(1, 6 if smoke else 20):
            before = proxy.requests
            mix.sample_batch(np.arange(j * BATCH, (j + 1) * BATCH))
            counts.append(proxy.requests - before)
        table.add("mixture", f"S3 requests per batch of {BATCH}, {label}, no node cache", statistics.median(counts),
                  "requests", "{:.0f}")


def run(table: Table, tmp: Path, smoke: bool) -> None:
    """The mixture section (see the module docstring)."""
    throughput(table, tmp, smoke)
    scale(table, tmp, smoke)


if __name__ == "__main__":  # python -m benchmarks.mixture_bench [--smoke]: this section alone
    t = Table()
    with tempfile.TemporaryDirectory(prefix="replaybuf-mixture-bench-") as d:
        run(t, Path(d), "--smoke" in sys.argv)
    print(t.render())
