"""Export (issue 33): a store goes back out as diffusion_policy's zarr v2 and robomimic's HDF5 — every
round trip compared with the *source* read another way (zarr / h5py on the original file), never
with the exporter's own reader."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_data import PUSHT, SHARED_DATA, requires_pusht

from replaybuf_core import ReplayBuffer, registry
from replaybuf_core.cli import main
from replaybuf_core.errors import FormatNotFoundError
from replaybuf_core.exporting import export_dataset
from replaybuf_core.importing import import_dataset

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

ROBOMIMIC = SHARED_DATA / "robomimic_indy7_reach.hdf5"


def _h5_items(path):
    """{dataset path: ndarray} and {object path: attrs} of an HDF5 file, read with h5py."""
    out, attrs = {}, {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            attrs[name] = {k: obj.attrs[k] for k in obj.attrs}
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        f.visititems(visit)
        attrs[""] = {k: f.attrs[k] for k in f.attrs}
    return out, attrs


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "SUO" or b.dtype.kind in "SUO":
        return a.tolist() == b.tolist()
    return a.shape == b.shape and a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=") and \
        np.array_equal(a.astype(a.dtype.newbyteorder("=")), b.astype(b.dtype.newbyteorder("=")), equal_nan=True)


# ------------------------------------------------------------------------------------------ registry
def test_both_formats_are_found_through_the_entry_point_group():
    found = registry.list_export_formats()
    assert {"diffusion-policy", "robomimic"} <= set(found)
    assert found["robomimic"].plugin == "exports"  # the built-in plugin, loaded like a third party's
    with pytest.raises(FormatNotFoundError, match="no replaybuf export format named 'hub'.*diffusion-policy"):
        registry.get_export_format("hub")


# ---------------------------------------------------------------------------------- diffusion_policy
@requires_pusht
def test_pusht_round_trip_gives_the_source_arrays_dtypes_included(tmp_path):
    store, out = tmp_path / "pusht.zarr", tmp_path / "out.zarr"
    assert import_dataset(PUSHT, store, "diffusion-policy", episodes="0:4", progress=False).ok
    report = export_dataset(store, out, "diffusion-policy", progress=False)
    assert "bit for bit" in report.compared[0]
    src, got = zarr.open_group(PUSHT, mode="r"), zarr.open_group(out, mode="r")
    ends = src["meta/episode_ends"][:4]
    assert np.array_equal(got["meta/episode_ends"][:], ends)
    for key in src["data"].keys():  # img stored uint8 in the store goes out float32, as the source has it
        a, b = src["data"][key], got["data"][key]
        assert b.dtype == a.dtype and np.array_equal(b[:], a[:int(ends[-1])]), key
    assert json.loads((out / "data" / "img" / ".zarray").read_text())["zarr_format"] == 2
    assert json.loads((out / "data" / "img" / ".zarray").read_text())["compressor"]["cname"] == "zstd"


@requires_pusht
def test_episodes_renames_and_images_dtype(tmp_path):
    store, out = tmp_path / "pusht.zarr", tmp_path / "out.zarr"
    assert import_dataset(PUSHT, store, "diffusion-policy", episodes="0:5", progress=False).ok
    export_dataset(store, out, "diffusion-policy", episodes="1,3:5", keys=["img", "action"],
                   rename="img=image", images_dtype="uint8", compressor="default", progress=False)
    src, got = zarr.open_group(PUSHT, mode="r"), zarr.open_group(out, mode="r")
    e = [0] + list(src["meta/episode_ends"][:5])
    rows = np.concatenate([np.arange(e[i], e[i + 1]) for i in (1, 3, 4)])
    assert sorted(got["data"].keys()) == ["action", "image"]
    assert np.array_equal(got["meta/episode_ends"][:], np.cumsum([e[i + 1] - e[i] for i in (1, 3, 4)]))
    assert got["data/image"].dtype == np.uint8
    assert json.loads((out / "data" / "image" / ".zarray").read_text())["compressor"]["cname"] == "lz4"
    assert np.array_equal(got["data/image"][:], src["data/img"].get_orthogonal_selection(rows).astype(np.uint8))
    assert np.array_equal(got["data/action"][:], src["data/action"].get_orthogonal_selection(rows))


def _numpy_store(lengths, rng, image_values=None):
    rb = ReplayBuffer.create_empty_numpy()
    for t in lengths:
        img = rng.integers(0, 256, (t, 8, 8, 3)).astype(np.float32) if image_values is None else \
            np.full((t, 8, 8, 3), image_values, np.float32)
        rb.add_episode({"img": img, "action": rng.standard_normal((t, 2)).astype(np.float32),
                        "step": np.arange(t, dtype=np.int64)})
    return rb


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6), data=st.data())
def test_any_episode_selection_of_a_numpy_buffer_round_trips(tmp_path_factory, lengths, data):
    """Against a simple model: the exported arrays are the chosen episodes' rows concatenated."""
    rng = np.random.default_rng(len(lengths))
    rb = _numpy_store(lengths, rng)
    chosen = data.draw(st.lists(st.integers(0, len(lengths) - 1), min_size=1, unique=True))
    out = tmp_path_factory.mktemp("dp") / "out.zarr"
    export_dataset(rb, out, "diffusion-policy", episodes=chosen, progress=False)
    got = zarr.open_group(out, mode="r")
    model = {k: np.concatenate([rb.get_episode(i)[k] for i in chosen]) for k in rb.keys()}
    assert np.array_equal(got["meta/episode_ends"][:], np.cumsum([lengths[i] for i in chosen]))
    for k, v in model.items():
        assert got[f"data/{k}"].dtype == v.dtype and np.array_equal(got[f"data/{k}"][:], v), k


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    rng = np.random.default_rng(0)
    rb = _numpy_store([3, 4], rng, image_values=0.5)
    out = tmp_path / "out.zarr"
    with pytest.raises(ValueError, match=r"images_dtype=uint8: key 'img', episode 0 row 0 holds 0\.5"):
        export_dataset(rb, out, "diffusion-policy", images_dtype="uint8", progress=False)
    with pytest.raises(KeyError, match="no key 'obs'.*'img'"):
        export_dataset(rb, out, "diffusion-policy", skip_keys=["obs"], progress=False)
    with pytest.raises(ValueError, match="two keys would be exported as 'x'"):
        export_dataset(rb, out, "diffusion-policy", rename="img=x,action=x", progress=False)
    with pytest.raises(ValueError, match="index 5 is out of range"):
        export_dataset(rb, out, "diffusion-policy", episodes="5", progress=False)
    assert not out.exists() and os.listdir(tmp_path) == []


def test_an_existing_destination_is_kept_unless_it_is_a_dataset_of_the_format(tmp_path):
    rb = _numpy_store([3, 4], np.random.default_rng(1))
    out = tmp_path / "out.zarr"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        export_dataset(rb, out, "diffusion-policy", progress=False)
    with pytest.raises(FileExistsError, match="not a dataset of the format"):
        export_dataset(rb, out, "diffusion-policy", overwrite=True, progress=False)
    assert (out / "notes.txt").read_text() == "mine"
    other = tmp_path / "dp.zarr"
    export_dataset(rb, other, "diffusion-policy", episodes="0", progress=False)
    export_dataset(rb, other, "diffusion-policy", episodes="1", overwrite=True, progress=False)
    assert zarr.open_group(other, mode="r")["meta/episode_ends"][:].tolist() == [4]


def test_a_failed_verification_or_an_interrupt_leaves_nothing_and_keeps_the_old(tmp_path, monkeypatch):
    from replaybuf_core.exporting.diffusion_policy import DiffusionPolicyExport

    rb = _numpy_store([3, 4], np.random.default_rng(2))
    out = tmp_path / "dp.zarr"
    export_dataset(rb, out, "diffusion-policy", episodes="0", progress=False)
    real_write = DiffusionPolicyExport.write

    def corrupting_write(self, plan, path, progress):
        notes = real_write(self, plan, path, progress)
        chunk = path / "data" / "action" / "0.0"
        chunk.write_bytes(chunk.read_bytes()[:-1] + bytes([chunk.read_bytes()[-1] ^ 1]))
        return notes

    monkeypatch.setattr(DiffusionPolicyExport, "write", corrupting_write)
    with pytest.raises(Exception, match="action|decompress|buffer"):
        export_dataset(rb, out, "diffusion-policy", overwrite=True, progress=False)

    def interrupted(self, plan, path, progress):
        real_write(self, plan, path, progress)
        raise KeyboardInterrupt

    monkeypatch.setattr(DiffusionPolicyExport, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_dataset(rb, out, "diffusion-policy", overwrite=True, progress=False)
    assert zarr.open_group(out, mode="r")["meta/episode_ends"][:].tolist() == [3]  # the old one, intact
    assert sorted(os.listdir(tmp_path)) == ["dp.zarr"]  # no build left beside it


# ------------------------------------------------------------------------------------------ robomimic
@pytest.mark.skipif(not ROBOMIMIC.is_file(), reason="robomimic sample not found")
def test_robomimic_sample_round_trips_every_dataset_and_attribute(tmp_path):
    store, out = tmp_path / "rm.zarr", tmp_path / "out.hdf5"
    assert import_dataset(ROBOMIMIC, store, "robomimic", progress=False).ok
    assert main(["export", "robomimic", str(store), str(out), "--no-progress"]) == 0
    src, src_attrs = _h5_items(ROBOMIMIC)
    got, got_attrs = _h5_items(out)
    assert set(got) == set(src)
    for name, value in src.items():
        assert _same(got[name], value), name
    for name, attrs in src_attrs.items():
        for k, v in attrs.items():
            assert k in got_attrs[name] and _same(got_attrs[name][k], v), (name, k)


def test_robomimic_masks_demo_names_and_a_trimmed_store(tmp_path):
    from test_import_hdf5_formats import write_robomimic

    src = write_robomimic(tmp_path / "src.hdf5")
    store, out = tmp_path / "rm.zarr", tmp_path / "out.hdf5"
    assert import_dataset(src, store, "robomimic", progress=False).ok
    export_dataset(store, out, "robomimic", episodes="0,2,3", progress=False)
    want, _ = _h5_items(src)
    got, _ = _h5_items(out)
    # robomimic's order is by demo number: demo_0, demo_2, demo_9, demo_10 -> episodes 0, 2, 3 are 0, 9, 10
    with h5py.File(out, "r") as f:
        assert sorted(f["data"].keys()) == ["demo_0", "demo_10", "demo_9"]
        assert f["data"].attrs["total"] == 5 + 6 + 3
        assert json.loads(f["data"].attrs["env_args"]) == {"env_name": "Lift", "env_kwargs": {"x": 1}}
        assert [d.decode() for d in f["mask/train"][()]] == ["demo_0", "demo_9", "demo_10"]
        assert list(f["mask/valid"][()]) == []
        assert f["data/demo_9"].attrs["model_file"] == "<mujoco/>"
    for demo in ("demo_0", "demo_9", "demo_10"):
        for ds in ("actions", "rewards", "dones", "states", "obs/pos", "next_obs/pos", "obs/agentview_image",
                   "obs/depth"):
            assert _same(got[f"data/{demo}/{ds}"], want[f"data/{demo}/{ds}"]), (demo, ds)


def test_robomimic_needs_actions_and_refuses_before_writing(tmp_path):
    rb = _numpy_store([3, 4], np.random.default_rng(3))
    out = tmp_path / "out.hdf5"
    with pytest.raises(ValueError, match="no key goes to 'actions'.*--rename action=actions"):
        export_dataset(rb, out, "robomimic", progress=False)
    assert not out.exists()
    report = export_dataset(rb, out, "robomimic", rename={"action": "actions", "img": "obs.agentview_image"},
                            env_args='{"env_name": "PushT"}', progress=False)
    assert any("demo_0" in n for n in report.notes)
    with h5py.File(out, "r") as f:
        assert sorted(f["data"].keys()) == ["demo_0", "demo_1"]
        assert f["data/demo_1/obs/agentview_image"].shape == (4, 8, 8, 3)
        assert np.array_equal(f["data/demo_1/actions"][()], rb.get_episode(1)["action"])
        assert f["data/demo_1"].attrs["num_samples"] == 4
    with pytest.raises(ValueError, match="env_args must be JSON"):
        export_dataset(rb, tmp_path / "b.hdf5", "robomimic", rename="action=actions", env_args="{oops",
                       progress=False)


# ---------------------------------------------------------------------------------------------- LeRobot
LEROBOT_V3 = SHARED_DATA / "lerobot_v3_synthetic_2cam"
requires_lerobot_v3 = pytest.mark.skipif(not LEROBOT_V3.is_dir(), reason="LeRobot v3 fixture not found")


def _parquet_rows(root):
    """Every data parquet of a LeRobot dataset concatenated in file order, read with pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.read_table(p) for p in sorted((root / "data").glob("chunk-*/file-*.parquet"))])


def _episodes(root):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in files]).to_pylist()


@pytest.fixture(scope="module")
def lerobot_store(tmp_path_factory):
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    if not LEROBOT_V3.is_dir():
        pytest.skip("LeRobot v3 fixture not found")
    store = tmp_path_factory.mktemp("lr") / "lr.zarr"
    assert import_dataset(LEROBOT_V3, store, "lerobot", progress=False).ok
    return store


@requires_lerobot_v3
def test_lerobot_round_trip_gives_the_original_rows_tasks_episodes_and_features(lerobot_store, tmp_path):
    out = tmp_path / "out"
    report = export_dataset(lerobot_store, out, "lerobot", progress=False)
    assert any("dB against the store" in c for c in report.compared)
    assert set(report.psnr) == {"observation.images.front", "observation.images.wrist"}
    assert min(report.psnr.values()) > 30
    info_a = json.loads((LEROBOT_V3 / "meta" / "info.json").read_text())
    info_b = json.loads((out / "meta" / "info.json").read_text())
    assert info_b["features"] == info_a["features"] and list(info_b["features"]) == list(info_a["features"])
    for k in ("codebase_version", "robot_type", "fps", "total_episodes", "total_frames", "total_tasks", "splits"):
        assert info_b[k] == info_a[k], k
    a, b = _parquet_rows(LEROBOT_V3), _parquet_rows(out)
    assert b.column_names == a.column_names
    for name in a.column_names:
        assert b.column(name).equals(a.column(name)), name
    ea, eb = _episodes(LEROBOT_V3), _episodes(out)
    for x, y in zip(ea, eb, strict=True):
        assert (x["episode_index"], x["tasks"], x["length"], x["dataset_from_index"]) == \
            (y["episode_index"], y["tasks"], y["length"], y["dataset_from_index"])
        assert y["stats/action/count"] == [x["length"]]
        assert np.allclose(y["stats/action/mean"], x["stats/action/mean"], atol=1e-6)
    pd = pytest.importorskip("pandas")
    assert pd.read_parquet(out / "meta" / "tasks.parquet").equals(pd.read_parquet(LEROBOT_V3 / "meta" / "tasks.parquet"))


@requires_lerobot_v3
def test_lerobot_export_in_many_files_passes_the_strict_importer_and_keeps_the_frames(lerobot_store, tmp_path):
    import av

    out, back = tmp_path / "out", tmp_path / "back.zarr"
    export_dataset(lerobot_store, out, "lerobot", episodes="2:9", data_files_size_in_mb=0.004,
                   video_files_size_in_mb=0.004, progress=False)
    assert len(list((out / "data").glob("*/*.parquet"))) > 2
    assert len(list((out / "videos" / "observation.images.front").glob("*/*.mp4"))) > 2
    assert import_dataset(out, back, "lerobot", progress=False).ok  # our importer's strict checks
    eps = _episodes(out)
    assert [e["episode_index"] for e in eps] == list(range(7))
    # each exported frame, decoded by PyAV from the exported file, against the original mp4's decode
    original = {}
    for e in _episodes(LEROBOT_V3)[2:9]:
        original[e["episode_index"]] = e
    rb = ReplayBuffer.create_from_path(lerobot_store)
    with ReplayBuffer.create_from_path(back) as got:
        assert got.n_episodes == 7 and np.array_equal(got.episode_lengths, rb.episode_lengths[2:9])
        a, b = int(rb.episode_ends[1]), int(rb.episode_ends[8])
        np.testing.assert_array_equal(got["action"][:], rb["action"][a:b])
        # the original frames read straight from the fixture's mp4 (the store's source), not from the store
        key = "observation.images.front"
        e0 = original[2]
        mp4 = LEROBOT_V3 / "videos" / key / f"chunk-{e0[f'videos/{key}/chunk_index']:03d}" / \
            f"file-{e0[f'videos/{key}/file_index']:03d}.mp4"
        with av.open(str(mp4)) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)
                      if f.time >= e0[f"videos/{key}/from_timestamp"] - 1e-6][:e0["length"]]
        mine = got[key][:e0["length"]]
        mse = np.mean((np.stack(frames).astype(np.float64) - mine) ** 2)
        assert 10 * np.log10(255 ** 2 / mse) > 30
    rb.close()


def test_lerobot_from_another_store_needs_fps_and_a_task_and_refuses_what_it_cannot_hold(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    rng = np.random.default_rng(4)
    rb = ReplayBuffer.create_empty_numpy()
    from replaybuf_core.testing.lerobot_writer import frame_pixels

    for e, t in enumerate((6, 5)):  # smooth moving frames, as a camera sees (noise does not survive a codec)
        rb.add_episode({"img": np.stack([frame_pixels(0, e, i, 16, 16) for i in range(t)]),
                        "action": rng.standard_normal((t, 2)).astype(np.float32), "step": np.arange(t)})
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"'img' has steps of shape \(8, 8, 3\).*uint8"):
        export_dataset(_numpy_store([3], rng), out, "lerobot", fps=10, task="t", progress=False)
    with pytest.raises(ValueError, match="no fps.*--fps"):
        export_dataset(rb, out, "lerobot", progress=False)
    with pytest.raises(ValueError, match="no LeRobot tasks.*--task"):
        export_dataset(rb, out, "lerobot", fps=10, progress=False)
    with pytest.raises(ValueError, match="'action' cannot be renamed to 'index'"):
        export_dataset(rb, out, "lerobot", fps=10, task="t", rename="action=index", progress=False)
    with pytest.raises(ValueError, match="below min_psnr 99"):
        export_dataset(rb, out, "lerobot", fps=10, task="t", min_psnr=99, progress=False)
    odd = ReplayBuffer.create_empty_numpy()
    odd.add_episode({"cam": np.zeros((2, 5, 6, 3), np.uint8), "action": np.zeros((2, 1), np.float32)})
    with pytest.raises(ValueError, match="camera 'cam' is 6x5; yuv420p video needs even sides"):
        export_dataset(odd, out, "lerobot", fps=10, task="t", progress=False)
    rgba = ReplayBuffer.create_empty_numpy()
    rgba.add_episode({"cam": np.zeros((2, 4, 4, 4), np.uint8)})
    with pytest.raises(ValueError, match="camera 'cam' has 4 channel.*--skip-key cam"):
        export_dataset(rgba, out, "lerobot", fps=10, task="t", progress=False)
    assert os.listdir(tmp_path) == []
    report = export_dataset(rb, out, "lerobot", fps=10, task="stack", video_codec="h264", progress=False)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["img"]["info"]["video.codec"] == "h264" and info["fps"] == 10
    assert info["features"]["action"] == {"dtype": "float32", "shape": [2], "names": None}
    rows = _parquet_rows(out)
    assert rows.column("timestamp").to_pylist() == pytest.approx([i / 10 for i in range(6)] + [i / 10 for i in range(5)])
    assert rows.column("index").to_pylist() == list(range(11))
    assert np.array_equal(np.stack(rows.column("step").to_numpy()), np.r_[np.arange(6), np.arange(5)])
    assert "h264" in report.notes[-1]


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=5), seed=st.integers(0, 2**16),
       levels=st.integers(1, 256))
def test_lerobot_statistics_against_numpy_over_the_values_themselves(sizes, seed, levels):
    """Frame statistics from histograms equal numpy's over the scaled pixels; the dataset's mean,
    std, min, max and count equal those of all episodes' rows pooled."""
    from replaybuf_core.exporting.lerobot import stats as lr_stats

    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, levels, (n, 3, 2, 3), dtype=np.uint8) for n in sizes]
    for f in frames:
        got = lr_stats.episode_stats(f, camera=True)
        x = f.reshape(-1, 3).astype(np.float64) / 255
        assert got["count"].tolist() == [len(f)]
        for name, ref in {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0),
                          **{k: np.quantile(x, q, axis=0) for k, q in lr_stats.QUANTILES.items()}}.items():
            np.testing.assert_allclose(got[name].reshape(3), ref, atol=1e-12, err_msg=name)
    values = [rng.standard_normal((n, 2)) for n in sizes]
    total = lr_stats.aggregate([lr_stats.episode_stats(v, camera=False) for v in values])
    pooled = np.concatenate(values)
    assert total["count"].tolist() == [len(pooled)]
    for name, ref in {"min": pooled.min(0), "max": pooled.max(0), "mean": pooled.mean(0), "std": pooled.std(0)}.items():
        np.testing.assert_allclose(total[name], ref, atol=1e-9, err_msg=name)


@requires_lerobot_v3
def test_lerobot_cameras_as_png_images_come_back_bit_for_bit(lerobot_store, tmp_path):
    out, back = tmp_path / "out", tmp_path / "back.zarr"
    report = export_dataset(lerobot_store, out, "lerobot", episodes="0:3", images=True, progress=False)
    assert not (out / "videos").exists() and "imagecodecs" in report.compared[0]
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["observation.images.wrist"] == {"dtype": "image", "shape": [48, 64, 3],
                                                            "names": ["height", "width", "channel"]}
    from PIL import Image
    import io

    cell = _parquet_rows(out).column("observation.images.front")[5].as_py()
    frame = np.asarray(Image.open(io.BytesIO(cell["bytes"])))  # the parquet cell read by Pillow directly
    assert import_dataset(out, back, "lerobot", progress=False).ok
    with ReplayBuffer.create_from_path(lerobot_store) as rb, ReplayBuffer.create_from_path(back) as got:
        n = int(rb.episode_ends[2])
        for key in ("observation.images.front", "observation.images.wrist"):
            np.testing.assert_array_equal(got[key][:], rb[key][:n])
        np.testing.assert_array_equal(frame, rb["observation.images.front"][5])


def test_lerobot_export_says_an_invalid_fps_is_invalid(tmp_path, capsys):
    """``--fps 0`` / ``nan`` / ``-5`` / ``inf`` are refused as invalid values (with why), not as "the
    store records no fps"; a store that records 10 fps does not silently override ``--fps 0``; a store
    recording an invalid fps is named as the source of the value. Nothing is written."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    store = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(store)) as rb:
        rb.add_episode({"action": np.zeros((4, 2), np.float32)})
    out = tmp_path / "out"
    for value in ("0", "nan", "-5", "inf"):
        assert main(["export", "lerobot", str(store), str(out), "--task", "t", "--fps", value,
                     "--no-progress"]) == 2, value
        err = capsys.readouterr().err
        assert f"--fps (fps=) is {float(value)!r}, not a frame rate" in err and "above 0" in err, err
        assert "records no fps" not in err, err
    with ReplayBuffer(str(store)) as rb:
        rb.store.set_attrs("data", {**rb.store.get_attrs("data"), "fps": 10})
    assert main(["export", "lerobot", str(store), str(out), "--task", "t", "--fps", "0", "--no-progress"]) == 2
    assert "--fps (fps=) is 0.0, not a frame rate" in capsys.readouterr().err
    with ReplayBuffer(str(store)) as rb:
        rb.store.set_attrs("data", {**rb.store.get_attrs("data"), "fps": 0})
    assert main(["export", "lerobot", str(store), str(out), "--task", "t", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the store's recorded fps (data attribute 'fps') is 0, not a frame rate" in err and "pass --fps N" in err
    assert not out.exists()
    assert main(["export", "lerobot", str(store), str(out), "--task", "t", "--fps", "12.5", "--no-progress"]) == 0
    assert json.loads((out / "meta/info.json").read_text())["fps"] == 12.5


def test_export_and_copy_over_a_symlink_replace_the_link_and_write_nothing_into_its_target(tmp_path, capsys):
    """``export ... LINK --overwrite`` (and ``copy``) replace the link itself: its target keeps exactly the
    files it had — no ``.replaybuf.lock`` left in it (listed with os.walk, dotfiles included) — and the
    export's report says the link was replaced and its target kept."""
    store = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(store)) as rb:
        rb.add_episode({"action": np.arange(8, dtype=np.float32).reshape(4, 2)})

    def listing(root):
        return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)

    for command in (["export", "diffusion-policy"], ["copy"]):
        target = tmp_path / f"{command[0]}-target.zarr"
        assert main(command + [str(store), str(target)] + (["--no-progress"] if command[0] == "export" else [])) == 0
        before = {p: (target / p).read_bytes() for p in listing(target)}
        link = tmp_path / f"{command[0]}-link.zarr"
        os.symlink(target, link)
        capsys.readouterr()
        assert main(command + [str(store), str(link), "--overwrite"] +
                    (["--no-progress"] if command[0] == "export" else [])) == 0
        out = capsys.readouterr().out
        assert {p: (target / p).read_bytes() for p in listing(target)} == before, command
        assert ".replaybuf.lock" not in listing(target), command
        assert not link.is_symlink() and link.is_dir(), command
        if command[0] == "export":
            assert f"{link} was a symlink to {target}: the link was replaced by the new dataset" in out, out
            assert zarr.open_group(str(link), mode="r")["data/action"][:].tolist() == \
                np.arange(8, dtype=np.float32).reshape(4, 2).tolist()
