"""``replaybuf serve`` on a big store: 100,000 episodes (2,000 in the smoke run) of 8 steps, a
32×32 camera, a 7-D state, a task per episode (``episode_attrs`` JSON, as a LeRobot import writes
it) and a mask.  Timed over real HTTP against a server on this machine (the store is built in
memory, saved, then served; building is not timed): opening the viewer (the store and its episode
list), the first page of the list (the goal: < 1 s), a page at the end, the first text filter
(which reads every task once), the same filter again, and one episode's plot data and first frame.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import numpy as np

from replaybuf_core import ReplayBuffer

from .common import Table

STEPS = 8


def _build(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    mem = ReplayBuffer.create_empty_numpy()
    img = rng.integers(0, 256, size=(STEPS, 32, 32, 3), dtype=np.uint8)
    for _ in range(n):
        mem.add_episode({"state": rng.normal(size=(STEPS, 7)).astype(np.float32), "img": img})
    mem.save_to_path(path, chunks={"img": (1024, 32, 32, 3), "state": (65536, 7)})
    tasks = ["pick the red cube", "push the blue block", "open the drawer"]
    with ReplayBuffer(str(path)) as rb:
        rb.update_meta({"mask.good": rng.random(n) < 0.9})
        attrs = np.array([json.dumps({"tasks": [tasks[i % 3]]}) for i in range(n)], dtype=object)
        rb.store.create_array("meta", "episode_attrs", shape=(n,), dtype=np.dtype(object), chunks=(65536,), codec=None)
        rb.store.write("meta", "episode_attrs", 0, attrs)


def _get_s(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        r.read()
    return time.perf_counter() - t


def run(table: Table, tmp: Path, smoke: bool) -> None:
    try:
        from replaybuf_core.viewer.app import create_app
        from replaybuf_core.viewer.server import ServerThread
    except ImportError:
        table.add("viewer", "skipped: pip install 'replaybuf[viewer]'", float("nan"), "")
        return
    n = 2_000 if smoke else 100_000
    store = tmp / "viewer.zarr"
    _build(store, n)
    t = time.perf_counter()
    app = create_app(str(store))
    t_open = time.perf_counter() - t
    with ServerThread(app) as url:
        t_first = _get_s(url) + _get_s(url + "api/summary") + _get_s(url + "api/episodes?offset=0&limit=50")
        t_last = _get_s(url + f"api/episodes?offset={n - 50}&limit=50")
        t_filter = _get_s(url + "api/episodes?q=drawer&mask=good&limit=50")
        t_filter2 = _get_s(url + "api/episodes?q=red&limit=50")
        t_series = _get_s(url + f"api/episodes/{n // 2}/series")
        t_frame = _get_s(url + f"api/episodes/{n // 2}/frames/img/0")
    label = f"{n:,} episodes"
    table.add("viewer", f"open the viewer (store + episode list), {label}", t_open * 1e3, "ms", "{:.0f}")
    table.add("viewer", "first page: the HTML, the summary, 50 rows (HTTP)", t_first * 1e3, "ms", "{:.0f}")
    table.add("viewer", "last page of the list", t_last * 1e3, "ms", "{:.0f}")
    table.add("viewer", "first text filter (reads every task once)", t_filter * 1e3, "ms", "{:.0f}")
    table.add("viewer", "another text filter", t_filter2 * 1e3, "ms", "{:.0f}")
    table.add("viewer", "an episode's plot data", t_series * 1e3, "ms", "{:.0f}")
    table.add("viewer", "an episode's first frame (PNG)", t_frame * 1e3, "ms", "{:.0f}")
    first = t_open + t_first
    table.ratio("viewer", f"open + first page, {label} (s)", first, "< 1 s", first < 1.0)
