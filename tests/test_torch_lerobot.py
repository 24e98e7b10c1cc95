"""The LeRobot-compatible dataset and the batched DataLoader path.

Expected LeRobot samples are computed by hand from the written LeRobot files, read another way
(pyarrow tables, PyAV decoding the mp4s, PNG bytes decoded with Pillow), with LeRobot's rule written
out here: query frame ``clamp(i + round(d * fps), episode start, episode end - 1)``, ``_is_pad``
where the unclamped frame leaves the episode, camera frames as float32 (C, H, W) ``x / 255``.
"""

from __future__ import annotations

import json
import pickle
from io import BytesIO

import numpy as np
import pytest

torch = pytest.importorskip("torch")
av = pytest.importorskip("av")
pq = pytest.importorskip("pyarrow.parquet")
PIL_Image = pytest.importorskip("PIL.Image")

from replaybuf_core import ReplayBuffer  # noqa: E402
from replaybuf_core.importing import import_dataset  # noqa: E402
from replaybuf_core.testing.lerobot_writer import TASKS, Camera, Spec, write_dataset  # noqa: E402
from replaybuf_core.torch import Batch, LeRobotDataset, WindowDataset, collate  # noqa: E402
from replaybuf_core.sampling.window_sampler import WindowSampler  # noqa: E402

LENGTHS = [6, 9, 3, 7]
FPS = 10
DELTAS = {"cam.rgb": [-0.1, 0.0], "observation.state": [-0.1, 0.0], "action": [i / FPS for i in range(-1, 4)],
          "observation.image": [0.0, 0.2]}


@pytest.fixture(scope="module")
def lerobot(tmp_path_factory):
    """A LeRobot v2.1 dataset (one H.264 camera, one PNG image key), its import, and the expected
    per-frame columns read straight from its files."""
    tmp = tmp_path_factory.mktemp("lr")
    spec = Spec(LENGTHS, fps=FPS, cameras={"cam.rgb": Camera(24, 32, gop=4)}, image_keys={"observation.image": (8, 10)})
    root = write_dataset(tmp / "ds", spec, "v2.1")
    report = import_dataset(root, tmp / "store.zarr", progress=False)
    assert report.ok, report.summary()
    cols: dict[str, list] = {}
    for ep in range(len(LENGTHS)):
        t = pq.read_table(root / f"data/chunk-000/episode_{ep:06d}.parquet").to_pydict()
        for k, v in t.items():
            cols.setdefault(k, []).extend(v)
        with av.open(str(root / f"videos/chunk-000/cam.rgb/episode_{ep:06d}.mp4")) as c:
            cols.setdefault("cam.rgb", []).extend(f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0]))
    cols["observation.image"] = [np.asarray(PIL_Image.open(BytesIO(c["bytes"])).convert("RGB"))
                                 for c in cols["observation.image"]]
    return root, str(tmp / "store.zarr"), cols


def _expected(cols, i_global, deltas=None):
    """LeRobot's sample for global frame ``i_global``, by hand."""
    ep = cols["episode_index"][i_global]
    starts = np.concatenate([[0], np.cumsum(LENGTHS)])
    lo, hi = starts[ep], starts[ep + 1] - 1
    out = {}
    for key in ("observation.state", "action", "cam.rgb", "observation.image", "next.reward", "timestamp",
                "frame_index", "episode_index", "index", "task_index"):
        def value(row):
            v = np.asarray(cols[key][row])
            if key in ("cam.rgb", "observation.image"):
                return np.moveaxis(v, -1, 0).astype(np.float32) / np.float32(255)
            return v
        if deltas and key in deltas:
            want = [i_global + int(round(d * FPS)) for d in deltas[key]]
            out[key] = np.stack([value(min(max(r, lo), hi)) for r in want])
            out[key + "_is_pad"] = np.array([not lo <= r <= hi for r in want])
        else:
            out[key] = value(i_global)
    out["task"] = TASKS[cols["task_index"][i_global]]
    return out


def _check(sample, want):
    assert set(want) <= set(sample), set(want) - set(sample)
    for k, w in want.items():
        got = sample[k]
        if k == "task":
            assert got == w
            continue
        assert isinstance(got, torch.Tensor), k
        np.testing.assert_array_equal(got.numpy(), np.asarray(w).astype(got.numpy().dtype), err_msg=k)
        assert tuple(got.shape) == np.shape(w), k


def test_samples_equal_lerobots_rule_by_hand(lerobot):
    root, store, cols = lerobot
    ds = LeRobotDataset(store, delta_timestamps=DELTAS)
    assert len(ds) == ds.num_frames == sum(LENGTHS) and ds.num_episodes == len(LENGTHS)
    info = json.loads((root / "meta" / "info.json").read_text())
    order = [k for k in info["features"] if k in ds.features]  # info.json's order, read here independently
    assert list(ds.features)[: len(order)] == order and list(ds[0])[: 3] == [k for k in order if k in ds[0]][:3]
    assert ds.fps == FPS and type(ds.fps) is int
    assert ds.meta.camera_keys == [k for k in order if info["features"][k]["dtype"] in ("video", "image")]
    assert ds.features["cam.rgb"]["dtype"] == "video" and ds.features["observation.state"]["shape"] == (3,)
    assert ds.meta.shapes["observation.state"] == (3,) and ds.meta.names["observation.state"] == \
        info["features"]["observation.state"]["names"]
    for i in range(len(ds)):
        _check(ds[i], _expected(cols, i, DELTAS))
    s = ds[0]
    assert s["cam.rgb"].dtype == torch.float32 and s["cam.rgb"].shape == (2, 3, 24, 32)
    assert s["index"].dtype == torch.int64 and s["index"].shape == () and s["timestamp"].dtype == torch.float32


def test_episode_subset_and_stats_and_transforms(lerobot):
    root, store, cols = lerobot
    flips = []

    def flip(x):
        flips.append(tuple(x.shape))
        return torch.flip(x, dims=[-1])

    ds = LeRobotDataset(repo_id="local/pick", root=store, episodes=[3, 1], image_transforms=flip)
    assert ds.repo_id == "local/pick" and len(ds) == LENGTHS[1] + LENGTHS[3] and ds.num_episodes == 2
    globals_ = list(range(6, 15)) + list(range(18, 25))
    for j, g in enumerate(globals_):
        want = _expected(cols, g)
        for cam in ("cam.rgb", "observation.image"):
            want[cam] = want[cam][..., ::-1]
        _check(ds[j], want)
    assert (3, 24, 32) in flips
    stats = ds.meta.stats  # written by LeRobot's writer into the dataset (here: the action count)
    assert "action" in stats
    with pytest.raises(ValueError, match=r"episodes \[7\] are not in"):
        LeRobotDataset(store, episodes=[7])
    with pytest.raises(ValueError, match="observation.nope"):
        LeRobotDataset(store, delta_timestamps={"observation.nope": [0.0]})
    with pytest.raises(ValueError, match="multiple of 1/fps"):
        LeRobotDataset(store, delta_timestamps={"action": [0.05]})


def test_dataloader_batches_equal_samples_with_and_without_workers(lerobot):
    root, store, cols = lerobot
    ds = LeRobotDataset(store, delta_timestamps=DELTAS)
    for workers in (0, 2):
        order = torch.utils.data.DataLoader(ds, batch_size=5, shuffle=False, num_workers=workers, collate_fn=collate)
        plain = torch.utils.data.DataLoader(ds, batch_size=5, shuffle=False, num_workers=workers)  # default_collate
        for b, (fast, slow) in enumerate(zip(order, plain)):
            assert fast["task"] == slow["task"]
            for k in fast:
                if k != "task":
                    np.testing.assert_array_equal(fast[k].numpy(), slow[k].numpy(), err_msg=k)
            for j in range(len(fast["task"])):
                _check({k: v[j] for k, v in fast.items()}, _expected(cols, b * 5 + j, DELTAS))


def test_a_store_without_lerobot_records_gets_computed_bookkeeping_and_stats(tmp_path):
    buf = ReplayBuffer.create_empty_numpy()
    rng = np.random.default_rng(0)
    for n in (4, 6):
        buf.add_episode({"img": rng.integers(0, 256, (n, 5, 6, 3), dtype=np.uint8),
                         "state": rng.standard_normal((n, 2)).astype(np.float32) * 3 + 10})
    buf.save_to_path(tmp_path / "dp.zarr")
    ds = LeRobotDataset(tmp_path / "dp.zarr", fps=5, delta_timestamps={"state": [-0.2, 0.0]})
    s = ds[5]  # episode 1, frame 1
    assert (int(s["episode_index"]), int(s["frame_index"]), int(s["index"])) == (1, 1, 5)
    assert float(s["timestamp"]) == np.float32(1 / 5) and s["task"] == ""
    assert s["state_is_pad"].tolist() == [False, False]
    np.testing.assert_array_equal(s["state"].numpy(), buf["state"][4:6])
    assert ds.features["img"]["dtype"] == "image" and s["img"].shape == (3, 5, 6)
    stats = ds.meta.stats
    allstate = buf["state"][:].astype(np.float64)
    np.testing.assert_allclose(stats["state"]["mean"], allstate.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats["state"]["std"], allstate.std(0), rtol=1e-10)
    img = buf["img"][:].reshape(-1, 3).astype(np.float64) / 255
    np.testing.assert_allclose(stats["img"]["mean"].ravel(), img.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats["img"]["std"].ravel(), img.std(0), rtol=1e-10)
    np.testing.assert_array_equal(stats["img"]["min"].ravel(), img.min(0))
    np.testing.assert_array_equal(stats["img"]["max"].ravel(), img.max(0))
    assert stats["img"]["mean"].shape == (3, 1, 1) and stats["img"]["count"].tolist() == [10]
    with pytest.raises(ValueError, match="needs the fps"):
        LeRobotDataset(tmp_path / "dp.zarr", delta_timestamps={"state": [0.0]})
    with pytest.raises(TypeError, match="repo_id=PATH or root=PATH"):
        LeRobotDataset()


def test_window_dataset_batches_pass_through_and_share_the_index(lerobot):
    _, store, _ = lerobot
    ds = WindowDataset(store, {"cam.rgb": [-1, 0], "action": range(0, 4)}, keys=["cam.rgb", "action"],
                       channels_first=True)
    n = len(ds)
    assert ds._sampler is None and ds._window_index is not None  # sized without keeping the store open
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._window_index is not None and clone.sampler.window_index is clone._window_index
    batch = ds.__getitems__([0, 5, n - 1])
    assert isinstance(batch, Batch) and len(batch) == 3
    data = collate(batch)
    assert data is batch.data and data["cam.rgb"].shape == (3, 2, 3, 24, 32) and data["cam.rgb"].dtype == torch.uint8
    raw = WindowSampler(ReplayBuffer.create_from_path(store), {"cam.rgb": [-1, 0], "action": range(0, 4)},
                        keys=["cam.rgb", "action"]).sample_batch([0, 5, n - 1])
    np.testing.assert_array_equal(data["cam.rgb"].numpy(), np.moveaxis(raw["cam.rgb"], -1, -3))
    np.testing.assert_array_equal(data["action"].numpy(), raw["action"])
    assert data["cam.rgb"].is_contiguous()
    assert torch.utils.data.default_collate(batch)["action"].shape == (3, 4, 3)  # torch's own collate works too


def test_a_store_changed_under_a_sized_dataset_is_reported(tmp_path):
    buf = ReplayBuffer.create_empty_numpy()
    for n in (4, 6):
        buf.add_episode({"x": np.arange(n, dtype=np.int64)})
    buf.save_to_path(tmp_path / "a.zarr")
    ds = WindowDataset(tmp_path / "a.zarr", {"x": [0, 1]})
    len(ds)
    clone = pickle.loads(pickle.dumps(ds))
    rb = ReplayBuffer(str(tmp_path / "a.zarr"))
    rb.add_episode({"x": np.arange(3, dtype=np.int64)})
    rb.close()
    with pytest.raises(RuntimeError, match="store changed"):
        clone[0]


def test_pack_shared_puts_a_batch_in_one_shared_storage():
    from replaybuf_core.torch.batch import pack_shared

    data = {"img": torch.arange(2 * 3 * 5, dtype=torch.uint8).reshape(2, 3, 5), "pad": torch.tensor([[True, False]] * 2),
            "act": torch.randn(2, 4, dtype=torch.float64), "task": ["a", "b"]}
    out = pack_shared(data)
    assert out["task"] is data["task"]
    ptrs = {out[k].untyped_storage().data_ptr() for k in ("img", "pad", "act")}
    assert len(ptrs) == 1 and out["img"].is_shared()
    for k in ("img", "pad", "act"):
        assert out[k].dtype == data[k].dtype and torch.equal(out[k], data[k])
        assert out[k].storage_offset() * out[k].element_size() % 64 == 0


def test_lerobot_quirks_from_a_break_it_trial(lerobot, tmp_path):
    root, store, cols = lerobot
    # task_index stacked by delta_timestamps: the task is still the anchor frame's, one per sample
    ds = LeRobotDataset(store, delta_timestamps={"task_index": [-0.1, 0.0]})
    starts = np.concatenate([[0], np.cumsum(LENGTHS)])
    picks = [0, int(starts[1]), int(starts[1]) + 1, int(starts[2])]  # first frames of episodes 1 and 2
    batch = collate(ds.__getitems__(picks))
    assert batch["task"] == [TASKS[cols["task_index"][i]] for i in picks]
    assert batch["task_index"].shape == (4, 2)
    # LeRobot v3's meta.episodes and v2's episode_data_index
    eps = ds.meta.episodes
    assert len(eps) == len(LENGTHS) and eps["length"] == LENGTHS
    assert eps["dataset_from_index"] == starts[:-1].tolist() and eps["dataset_to_index"] == starts[1:].tolist()
    assert eps[1]["tasks"] == [TASKS[1]] and eps[-1]["episode_index"] == len(LENGTHS) - 1
    sub = LeRobotDataset(store, episodes=[3, 1])
    edi = sub.episode_data_index
    assert edi["from"].tolist() == [0, LENGTHS[1]] and edi["to"].tolist() == [LENGTHS[1], LENGTHS[1] + LENGTHS[3]]
    # episodes are checked, not coerced
    for bad, error in (([1.7], TypeError), ("1", TypeError), ([1, 1], ValueError), ([True], TypeError)):
        with pytest.raises(error):
            LeRobotDataset(store, episodes=bad)
    with pytest.raises(IndexError, match="out of range"):
        ds[2**63]


def test_a_store_without_fps_or_timestamps_is_refused_and_strings_are_named(tmp_path):
    buf = ReplayBuffer.create_empty_numpy()
    buf.add_episode({"x": np.arange(3, dtype=np.float32), "note": np.array(["a", "b", "c"], dtype=object)})
    buf.save_to_path(tmp_path / "nofps.zarr")
    with pytest.raises(ValueError, match="pass fps="):
        LeRobotDataset(tmp_path / "nofps.zarr")
    ds = LeRobotDataset(tmp_path / "nofps.zarr", fps=3)
    assert ds.features["note"]["dtype"] == "string" and ds[2]["note"] == "c"
    assert float(ds[2]["timestamp"]) == np.float32(2 / 3)
    empty = ReplayBuffer.create_empty_zarr()
    empty.add_episode({"x": np.arange(2, dtype=np.float32)})
    empty.drop_episode()
    empty.save_to_path(tmp_path / "empty.zarr")
    with pytest.raises(ValueError, match="it has no episodes"):
        LeRobotDataset(tmp_path / "empty.zarr", fps=3, episodes=[0])


def test_batch_checks_its_size_and_indices():
    with pytest.raises(ValueError, match="hold \\[3\\] samples"):
        Batch({"a": torch.zeros(3)}, 5)
    b = Batch({"a": torch.arange(3), "task": ["x", "y", "z"]}, 3)
    assert b[-1]["task"] == "z" and len(b[0:2]) == 2
    with pytest.raises(TypeError, match="numbered by int"):
        b[1.0]
    with pytest.raises(IndexError, match="out of range"):
        b[3]


def test_fps_given_for_a_store_with_its_own_is_refused_unless_equal(lerobot):
    """A break-it trial's finding: fps= silently replaced the store's frame rate (timestamps of 10 fps
    rows read as 30 fps)."""
    _, store, cols = lerobot
    with pytest.raises(ValueError, match=rf"fps=30 differs from the store's own fps {FPS:g}"):
        LeRobotDataset(store, fps=30)
    ds = LeRobotDataset(store, fps=FPS)
    assert ds.fps == FPS and float(ds[3]["timestamp"]) == np.float32(cols["timestamp"][3])


def test_lerobot_061_metadata_and_dataset_api(lerobot):
    root, store, cols = lerobot
    from pathlib import Path

    info = json.loads((root / "meta" / "info.json").read_text())
    ds = LeRobotDataset("my/repo", root=store)
    meta = ds.meta
    assert meta.repo_id == "my/repo" and isinstance(meta.root, Path) and meta.root == Path(store)
    assert meta.total_tasks == len(TASKS) == info["total_tasks"]
    assert meta.chunks_size == info["chunks_size"] and meta.data_path == info["data_path"]
    assert meta.video_path == info["video_path"]
    pd = pytest.importorskip("pandas")
    assert isinstance(meta.tasks, pd.DataFrame) and list(meta.tasks.columns) == ["task_index"]
    for i, text in enumerate(TASKS):
        assert meta.get_task_index(text) == i and int(meta.tasks.loc[text, "task_index"]) == i
    assert meta.get_task_index("no such task") is None
    # raw rows: stored values at one frame, no deltas, frames as stored (uint8 H, W, C)
    raw = ds.get_raw_item(7)
    assert raw["cam.rgb"].dtype == torch.uint8 and tuple(raw["cam.rgb"].shape) == (24, 32, 3)
    np.testing.assert_array_equal(raw["observation.state"].numpy(), np.asarray(cols["observation.state"][7]))
    cols_sel = ds.select_columns(["action", "frame_index"])
    np.testing.assert_array_equal(cols_sel["action"].numpy(), np.asarray(cols["action"]))
    np.testing.assert_array_equal(cols_sel["frame_index"].numpy(), np.asarray(cols["frame_index"]))
    with pytest.raises(KeyError, match="nope"):
        ds.select_columns("nope")
    # return_uint8 and the transforms setters
    u8 = LeRobotDataset(store, return_uint8=True)
    assert u8[3]["cam.rgb"].dtype == torch.uint8 and tuple(u8[3]["cam.rgb"].shape) == (3, 24, 32)
    np.testing.assert_array_equal(u8[3]["cam.rgb"].numpy(), np.moveaxis(cols["cam.rgb"][3], -1, 0))
    ds.set_image_transforms(lambda x: x * 0)
    assert float(ds[1]["cam.rgb"].abs().sum()) == 0.0
    ds.clear_image_transforms()
    assert float(ds[1]["cam.rgb"].abs().sum()) > 0.0
    with pytest.raises(TypeError, match="callable"):
        ds.set_image_transforms(3)
    # what replaybuf does not do fails by name, not with an AttributeError
    for obj, name in ((ds, "push_to_hub"), (ds, "add_frame"), (meta, "get_video_file_path"), (meta, "save_episode")):
        with pytest.raises(NotImplementedError, match=name):
            getattr(obj, name)
    with pytest.raises(AttributeError):
        ds.no_such_thing
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install datasets"):
            ds.hf_dataset
    else:
        assert ds.hf_dataset.num_rows == len(ds)


def _retask(root, texts):
    """Give LeRobot dataset ``root`` (v2.1) other task texts: task_index i now means ``texts[i]``."""
    (root / "meta" / "tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                                       for i, t in enumerate(texts)))
    lines = [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]
    for rec in lines:
        rec["tasks"] = [texts[TASKS.index(t)] for t in rec["tasks"]]
    (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_merged_and_edited_lerobot_stores_keep_their_metadata_true(tmp_path):
    a = write_dataset(tmp_path / "a", Spec([5, 4], fps=FPS), "v2.1")
    b = write_dataset(tmp_path / "b", Spec([3, 6, 2], fps=FPS), "v2.1")
    other = ["stack the cups", TASKS[1]]
    _retask(b, other)
    c = write_dataset(tmp_path / "c", Spec([4], fps=2 * FPS), "v2.1")
    for root in (a, b, c):
        assert import_dataset(root, tmp_path / f"{root.name}.zarr", progress=False).ok
    with pytest.raises(ValueError, match="20 fps, source 0 10 fps"):
        ReplayBuffer.merge_stores([tmp_path / "a.zarr", tmp_path / "c.zarr"], tmp_path / "ac.zarr")
    assert not (tmp_path / "ac.zarr").exists()
    report = ReplayBuffer.merge_stores([tmp_path / "a.zarr", tmp_path / "b.zarr"], tmp_path / "ab.zarr")
    assert any("renumbered" in n for n in report["notes"])
    ds = LeRobotDataset(tmp_path / "ab.zarr")
    # expected: each source's own parquet task_index, read with pyarrow, through its own tasks.jsonl
    want = []
    for root, texts in ((a, TASKS), (b, other)):
        for ep in range(len(list((root / "data/chunk-000").glob("*.parquet")))):
            t = pq.read_table(root / f"data/chunk-000/episode_{ep:06d}.parquet").to_pydict()["task_index"]
            want += [texts[i] for i in t]
    assert [ds[i]["task"] for i in range(len(ds))] == want
    assert ds.meta.total_tasks == 3 and ds.meta.get_task_index("stack the cups") == 2
    assert int(np.asarray(ds.meta.stats["action"]["count"]).ravel()[0]) == len(ds) == 20  # every source's frames
    # an edit: the imported stats.json would count the deleted steps
    with ReplayBuffer(tmp_path / "a.zarr") as rb:
        imported = json.loads((a / "meta" / "stats.json").read_text()) if (a / "meta/stats.json").exists() else None
        served = LeRobotDataset(tmp_path / "a.zarr").meta.stats["action"]
        if imported is not None:  # the dataset's own stats.json is what is served before an edit
            np.testing.assert_allclose(served["mean"], np.asarray(imported["action"]["mean"]))
        rb.delete_episodes([0])
    after = LeRobotDataset(tmp_path / "a.zarr")
    assert int(np.asarray(after.meta.stats["action"]["count"]).ravel()[0]) == len(after) == 4
    kept = np.asarray(pq.read_table(a / "data/chunk-000/episode_000001.parquet").to_pydict()["action"], dtype=np.float64)
    np.testing.assert_allclose(after.meta.stats["action"]["mean"], kept.mean(0), rtol=1e-6)  # the kept steps only
    assert after.meta.info["total_frames"] == 4 and after.meta.info["total_episodes"] == 1


def test_an_edited_lerobot_store_numbers_and_times_its_kept_frames(tmp_path):
    """After a delete and a front trim, samples number the store's frames as LeRobot numbers an edited
    dataset: index = row, frame_index from each episode's first kept frame, timestamp counted from it
    (expected values: the source parquet, read with pyarrow, rows picked by the test)."""
    root = write_dataset(tmp_path / "ds", Spec([5, 4, 6], fps=FPS), "v2.1")
    assert import_dataset(root, tmp_path / "s.zarr", progress=False).ok
    src = [pq.read_table(root / f"data/chunk-000/episode_{e:06d}.parquet").to_pydict() for e in range(3)]
    ds = LeRobotDataset(tmp_path / "s.zarr")  # before any edit: the parquet's own columns
    assert [float(ds[i]["timestamp"]) for i in range(5)] == pytest.approx(src[0]["timestamp"])
    with ReplayBuffer(tmp_path / "s.zarr") as rb:
        rb.delete_episodes([1])
        rb.trim_episode(0, start=2)
    ds = LeRobotDataset(tmp_path / "s.zarr")
    kept = [(0, r) for r in range(2, 5)] + [(2, r) for r in range(6)]
    samples = [ds[i] for i in range(len(ds))]
    assert len(samples) == len(kept) == 9
    assert [int(x["index"]) for x in samples] == list(range(9))
    assert [int(x["frame_index"]) for x in samples] == [0, 1, 2, 0, 1, 2, 3, 4, 5]
    assert [int(x["episode_index"]) for x in samples] == [0] * 3 + [2] * 6  # the source's numbers
    first = {0: src[0]["timestamp"][2], 2: src[2]["timestamp"][0]}
    want_t = [src[e]["timestamp"][r] - first[e] for e, r in kept]
    np.testing.assert_allclose([float(x["timestamp"]) for x in samples], want_t, atol=1e-6)
    np.testing.assert_allclose(np.stack([x["action"].numpy() for x in samples]),
                               np.asarray([src[e]["action"][r] for e, r in kept]), rtol=0, atol=0)


def test_a_merge_of_two_imports_numbers_every_episode_and_frame_once(tmp_path):
    a = write_dataset(tmp_path / "a", Spec([5, 4], fps=FPS), "v2.1")
    b = write_dataset(tmp_path / "b", Spec([3, 6], fps=FPS), "v2.1")
    for root in (a, b):
        assert import_dataset(root, tmp_path / f"{root.name}.zarr", progress=False).ok
    ReplayBuffer.merge_stores([tmp_path / "a.zarr", tmp_path / "b.zarr"], tmp_path / "ab.zarr")
    ds = LeRobotDataset(tmp_path / "ab.zarr")
    samples = [ds[i] for i in range(len(ds))]
    assert [int(s["index"]) for s in samples] == list(range(18))  # each source counted its own from 0
    assert [int(s["episode_index"]) for s in samples] == [0] * 5 + [1] * 4 + [2] * 3 + [3] * 6
    third = LeRobotDataset(tmp_path / "ab.zarr", episodes=[2])
    assert len(third) == 3 and {int(third[i]["episode_index"]) for i in range(3)} == {2}
    want = np.asarray(pq.read_table(b / "data/chunk-000/episode_000000.parquet").to_pydict()["action"])
    np.testing.assert_array_equal(np.stack([third[i]["action"].numpy() for i in range(3)]), want)
    import copy

    row = ds[0]["action"]
    assert type(row) is torch.Tensor and torch.equal(copy.deepcopy(row), row)


def test_a_subset_import_serves_statistics_of_its_own_frames(tmp_path):
    root = write_dataset(tmp_path / "ds", Spec([5, 4, 6], fps=FPS), "v2.1")
    assert import_dataset(root, tmp_path / "sub.zarr", episodes="0:2", progress=False).ok
    ds = LeRobotDataset(tmp_path / "sub.zarr")
    kept = np.concatenate([np.asarray(pq.read_table(root / f"data/chunk-000/episode_{e:06d}.parquet")
                                      .to_pydict()["action"], dtype=np.float64) for e in (0, 1)])
    np.testing.assert_allclose(ds.meta.stats["action"]["mean"], kept.mean(0), rtol=1e-6)  # not the 3-episode stats.json
