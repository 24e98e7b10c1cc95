"""The HDF5 import formats (robomimic, Minari, d3rlpy, ManiSkill) on the real files of shared/data and
on small files the tests write with h5py for every edge case.  Expected values are read here with
h5py directly (and the episode splits computed here), not through the importer."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.importing import import_dataset

from shared_data import SHARED_DATA

h5py = pytest.importorskip("h5py")

ROBOMIMIC = SHARED_DATA / "robomimic_indy7_reach.hdf5"
MINARI = SHARED_DATA / "minari" / "D4RL" / "door" / "human-v2"


def opened(path):
    return ReplayBuffer.create_from_path(path)


def meta(rb, name):
    return rb.store.read("meta", name, 0, rb.store.shape("meta", name)[0])


def episode_attrs(rb):
    return [json.loads(s) for s in meta(rb, "episode_attrs")]


# ------------------------------------------------------------------------------------------ robomimic
@pytest.mark.skipif(not ROBOMIMIC.is_file(), reason="robomimic sample missing")
def test_robomimic_real_file(tmp_path):
    report = import_dataset(ROBOMIMIC, tmp_path / "o.zarr", progress=False)
    assert report.ok and report.format == "robomimic"
    rb = opened(tmp_path / "o.zarr")
    with h5py.File(ROBOMIMIC, "r") as f:
        demos = sorted(f["data"].keys(), key=lambda n: int(n.split("_")[1]))  # robomimic's order
        assert demos[:3] == ["demo_0", "demo_1", "demo_2"] and list(f["data"].keys())[2] == "demo_10"
        np.testing.assert_array_equal(meta(rb, "source_episode_index"), [int(d.split("_")[1]) for d in demos])
        np.testing.assert_array_equal(rb.episode_ends, np.cumsum([f["data"][d].attrs["num_samples"] for d in demos]))
        for key, path in (("actions", "actions"), ("obs.eef_pos", "obs/eef_pos"),
                          ("states.articulation.robot.root_pose", "states/articulation/robot/root_pose")):
            want = np.concatenate([f["data"][d][path][()] for d in demos])
            assert rb[key].dtype == want.dtype
            np.testing.assert_array_equal(rb[key][:], want)
        np.testing.assert_array_equal(meta(rb, "episode.initial_state.articulation.robot.joint_position"),
                                      np.stack([f["data"][d]["initial_state/articulation/robot/joint_position"][()]
                                                for d in demos]))
        per = episode_attrs(rb)
        assert per[7]["name"] == demos[7]
        assert per[7]["attrs"]["success"] == bool(f["data"][demos[7]].attrs["success"])
    attrs = rb.store.get_attrs("data")["source_attrs"]
    assert attrs["data"]["env_args"] == {"env_name": "Isaac-Reach-Indy7-IK-Rel-v0", "type": 2}
    assert attrs["data"]["total"] == 2325


def write_robomimic(path, lengths=None, names=None, next_obs_shifted=True, extra=None):
    rng = np.random.default_rng(0)
    names = names or ["demo_0", "demo_2", "demo_10", "demo_9"]
    lengths = lengths or [5, 7, 3, 6]
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "env_kwargs": {"x": 1}})
        data.attrs["total"] = sum(lengths)
        for name, t in zip(names, lengths):
            g = data.create_group(name)
            g.attrs["num_samples"] = t
            g.attrs["model_file"] = "<mujoco/>"
            g.attrs["blob"] = np.void(b"\xff\x00\xfe")
            g.create_dataset("actions", data=rng.standard_normal((t, 7)).astype(">f4"))  # big-endian
            g.create_dataset("rewards", data=rng.random(t))
            g.create_dataset("dones", data=np.arange(t) == t - 1)
            g.create_dataset("states", data=rng.standard_normal((t, 10)))
            obs = rng.standard_normal((t + 1, 3)).astype("f4")
            g.create_dataset("obs/pos", data=obs[:t])
            g.create_dataset("next_obs/pos", data=obs[1:] if next_obs_shifted else obs[:t])
            g.create_dataset("obs/agentview_image", data=rng.integers(0, 255, (t, 16, 16, 3), dtype=np.uint8),
                             compression="gzip")
            g.create_dataset("obs/depth", data=rng.integers(0, 4096, (t, 16, 16, 1), dtype=np.uint16))
            if extra:
                extra(g, t)
        m = f.create_group("mask")
        m.create_dataset("train", data=np.array([b"demo_0", b"demo_10", b"demo_9"]))
        m.create_dataset("valid", data=np.array([b"demo_2"]))
    return path


def test_robomimic_layout_order_masks_and_byte_order(tmp_path):
    src = write_robomimic(tmp_path / "r.hdf5")
    report = import_dataset(src, tmp_path / "o.zarr", progress=False)
    assert report.ok, report.summary()
    rb = opened(tmp_path / "o.zarr")
    order = ["demo_0", "demo_2", "demo_9", "demo_10"]  # by number, gaps kept
    np.testing.assert_array_equal(meta(rb, "source_episode_index"), [0, 2, 9, 10])
    with h5py.File(src, "r") as f:
        for key, path in (("actions", "actions"), ("obs.pos", "obs/pos"), ("next_obs.pos", "next_obs/pos"),
                          ("obs.agentview_image", "obs/agentview_image"), ("obs.depth", "obs/depth"),
                          ("rewards", "rewards"), ("dones", "dones"), ("states", "states")):
            want = np.concatenate([f["data"][d][path][()] for d in order])
            np.testing.assert_array_equal(rb[key][:], want)
            assert rb[key].dtype == want.dtype.newbyteorder("="), key
    assert rb.store.get_attrs("data")["conversions"]["actions"]["source_dtype"] == ">f4"
    assert "webp" in str(rb.get_compressors()["obs.agentview_image"]).lower()
    assert rb["obs.depth"].dtype == np.uint16 and "webp" not in str(rb.get_compressors()["obs.depth"]).lower()
    train, valid = meta(rb, "mask.train"), meta(rb, "mask.valid")
    np.testing.assert_array_equal(train, [True, False, True, True])
    np.testing.assert_array_equal(valid, ~train)
    from replaybuf_core.sampling.sampler import SequenceSampler

    s = SequenceSampler(rb, sequence_length=2, episode_mask=valid)  # only demo_2's 7 steps: 6 windows
    assert len(s) == 6
    per = episode_attrs(rb)
    assert per[0]["attrs"]["model_file"] == "<mujoco/>"
    assert per[0]["attrs"]["blob"] == {"base64": "/wD+"}  # non-UTF-8 bytes are kept, not dropped
    assert rb.store.get_attrs("data")["source_attrs"]["data"]["env_args"]["env_kwargs"] == {"x": 1}


def test_robomimic_drop_next_obs_checks_the_shift(tmp_path):
    src = write_robomimic(tmp_path / "r.hdf5")
    report = import_dataset(src, tmp_path / "o.zarr", progress=False, format_options={"drop_next_obs": True})
    assert report.ok
    assert "next_obs.pos" not in opened(tmp_path / "o.zarr").keys()
    bad = write_robomimic(tmp_path / "bad.hdf5", next_obs_shifted=False)
    with pytest.raises(ValueError, match=r"drop_next_obs: demo_0: next_obs/pos row 0 differs from obs row 1"):
        import_dataset(bad, tmp_path / "p.zarr", progress=False, format_options={"drop_next_obs": True})
    assert not (tmp_path / "p.zarr").exists()


def test_robomimic_edge_cases_are_named(tmp_path):
    def only_first(g, t):
        if g.name.endswith("demo_0"):
            g.create_dataset("obs/extra", data=np.zeros((t, 2)))

    src = write_robomimic(tmp_path / "a.hdf5", extra=only_first)
    with pytest.raises(ValueError, match=r"obs/extra is in 1 of 4 episodes \(missing in \['demo_2', 'demo_9', "
                                         r"'demo_10'\]\).*missing_keys='drop'"):
        import_dataset(src, tmp_path / "o.zarr", progress=False)
    report = import_dataset(src, tmp_path / "o.zarr", progress=False, format_options={"missing_keys": "drop"})
    assert report.ok and "obs.extra" not in opened(tmp_path / "o.zarr").keys()
    assert any("obs/extra" in n for n in report.notes)

    def varying(g, t):
        g.create_dataset("obs/v", data=np.zeros((t, 2 if g.name.endswith("demo_0") else 3)))

    src = write_robomimic(tmp_path / "b.hdf5", extra=varying)
    with pytest.raises(ValueError, match=r"obs/v differs between episodes \(dtype, step shape\)"):
        import_dataset(src, tmp_path / "p.zarr", progress=False)
    src = write_robomimic(tmp_path / "c.hdf5", lengths=[5, 0, 3, 6])
    with pytest.raises(ValueError, match=r"episode\(s\) 1 of 4 have zero length"):
        import_dataset(src, tmp_path / "p.zarr", progress=False)
    report = import_dataset(src, tmp_path / "p.zarr", progress=False, drop_empty_episodes=True)
    assert report.ok and opened(tmp_path / "p.zarr").n_episodes == 3


def test_unavailable_filters_are_named(tmp_path, monkeypatch):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    src = tmp_path / "f.hdf5"
    with h5py.File(src, "w") as f:
        g = f.create_group("data/demo_0")
        g.attrs["num_samples"] = 4
        g.create_dataset("actions", data=np.zeros((4, 2)), **hdf5plugin.Blosc())
    from replaybuf_core.formats.hdf5 import common

    monkeypatch.setattr(common.require_h5py().h5z, "filter_avail", lambda fid: False)
    with pytest.raises(ValueError, match=r"dataset /data/demo_0/actions uses HDF5 filter 32001 .*pip install hdf5plugin"):
        import_dataset(src, tmp_path / "o.zarr", progress=False)


# ------------------------------------------------------------------------------------------ Minari
@pytest.mark.skipif(not MINARI.is_dir(), reason="Minari sample missing")
def test_minari_real_dataset_keeps_the_final_observation(tmp_path):
    report = import_dataset(MINARI, tmp_path / "o.zarr", progress=False)
    assert report.ok and report.format == "minari"
    rb = opened(tmp_path / "o.zarr")
    with h5py.File(MINARI / "data" / "main_data.hdf5", "r") as f:
        names = sorted(f.keys(), key=lambda n: int(n.split("_")[1]))
        np.testing.assert_array_equal(rb["observations"][:], np.concatenate([f[n]["observations"][:-1] for n in names]))
        np.testing.assert_array_equal(meta(rb, "final.observations"), np.stack([f[n]["observations"][-1] for n in names]))
        np.testing.assert_array_equal(rb["actions"][:], np.concatenate([f[n]["actions"][()] for n in names]))
        np.testing.assert_array_equal(meta(rb, "final.infos.success"), [f[n]["infos/success"][-1] for n in names])
        assert episode_attrs(rb)[3]["attrs"]["seed"] == int(f[names[3]].attrs["seed"])
    assert rb.n_steps == 6729 and rb.n_episodes == 25
    md = rb.store.get_attrs("data")["source_attrs"]["metadata"]
    assert md["dataset_id"] == "D4RL/door/human-v2" and md["env_spec"]["id"] == "AdroitHandDoor-v1"


def test_minari_dict_tuple_text_and_jpeg_observations(tmp_path):
    from PIL import Image

    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    rng = np.random.default_rng(1)
    jpegs = {}
    with h5py.File(root / "data" / "main_data.hdf5", "w") as f:
        for i, t in enumerate([4, 6]):
            g = f.create_group(f"episode_{i}")
            g.attrs["id"], g.attrs["total_steps"] = i, t
            g.create_dataset("observations/pos", data=rng.standard_normal((t + 1, 2)))
            g.create_dataset("observations/tuple/_index_0", data=np.arange(t + 1))
            frames = []
            for k in range(t + 1):
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(buf, format="JPEG")
                frames.append(np.frombuffer(buf.getvalue(), dtype=np.uint8))
            jpegs[i] = frames
            ds = g.create_dataset("observations/image", (t + 1,), dtype=h5py.vlen_dtype(np.uint8))
            for k, fr in enumerate(frames):
                ds[k] = fr
            g.create_dataset("actions", data=rng.standard_normal((t, 3)).astype("f4"))
            g.create_dataset("rewards", data=rng.random(t))
            g.create_dataset("terminations", data=np.zeros(t, bool))
            g.create_dataset("truncations", data=np.zeros(t, bool))
            g.create_dataset("infos/text", data=[f"step {k}" for k in range(t + 1)], dtype=h5py.string_dtype())
    (root / "data" / "metadata.json").write_text(json.dumps({"dataset_id": "test/x-v0", "env_spec": "{\"id\": \"X\"}"}))
    report = import_dataset(root, tmp_path / "o.zarr", progress=False)
    assert report.ok, report.summary()
    assert "encoded images (JPEG/PNG bytes)" in report.summary()
    rb = opened(tmp_path / "o.zarr")
    want = np.stack([np.asarray(Image.open(io.BytesIO(fr.tobytes()))) for i in (0, 1) for fr in jpegs[i][:-1]])
    assert np.array_equal(rb["observations.image"][:], want)
    assert list(rb["infos.text"][:3]) == ["step 0", "step 1", "step 2"]
    np.testing.assert_array_equal(rb["observations.tuple._index_0"][:], np.r_[np.arange(4), np.arange(6)])
    assert list(meta(rb, "final.infos.text")) == ["step 4", "step 6"]
    assert rb.store.get_attrs("data")["source_attrs"]["metadata"]["env_spec"] == {"id": "X"}


# ------------------------------------------------------------------------------------------ d3rlpy
def test_d3rlpy_v1_split_as_d3rlpy_and_the_tail_reported(tmp_path):
    n = 20
    rng = np.random.default_rng(2)
    terminals = np.zeros(n)
    terminals[[4, 11]] = 1
    episode_terminals = terminals.copy()
    episode_terminals[15] = 1  # a timeout
    src = tmp_path / "v1.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("observations", data=rng.standard_normal((n, 3)).astype("f4"))
        f.create_dataset("actions", data=rng.integers(0, 4, n))
        f.create_dataset("rewards", data=rng.random(n).astype("f4"))
        f.create_dataset("terminals", data=terminals.astype("f4"))
        f.create_dataset("episode_terminals", data=episode_terminals.astype("f4"))
        f.create_dataset("discrete_action", data=True)
    report = import_dataset(src, tmp_path / "o.zarr", progress=False)
    assert report.ok and report.format == "d3rlpy"
    rb = opened(tmp_path / "o.zarr")
    np.testing.assert_array_equal(rb.episode_ends, [5, 12, 16])  # ends after each flag
    assert "the last 4 step(s) (rows 16..19) follow the last terminal flag" in report.summary()
    with h5py.File(src, "r") as f:
        np.testing.assert_array_equal(rb["observations"][:], f["observations"][:16])
    assert rb.store.get_attrs("data")["source_attrs"]["discrete_action"] is True


def test_d3rlpy_v2_columns_and_tuple_observations(tmp_path):
    rng = np.random.default_rng(3)
    src = tmp_path / "v2.h5"
    lengths = [3, 5]
    with h5py.File(src, "w") as f:
        f.create_dataset("columns", data=[b"observations", b"actions", b"rewards", b"terminated"])
        f.create_dataset("num_episodes", data=2)
        for i, t in enumerate(lengths):
            f.create_dataset(f"observations_{i}_0", data=rng.standard_normal((t, 2)))
            f.create_dataset(f"observations_{i}_1", data=rng.integers(0, 9, (t, 4)))
            f.create_dataset(f"actions_{i}", data=rng.standard_normal((t, 1)).astype("f4"))
            f.create_dataset(f"rewards_{i}", data=rng.random((t, 1)).astype("f4"))
            f.create_dataset(f"terminated_{i}", data=float(i))
        f.create_dataset("version", data="2.1")
    report = import_dataset(src, tmp_path / "o.zarr", progress=False)
    assert report.ok, report.summary()
    rb = opened(tmp_path / "o.zarr")
    np.testing.assert_array_equal(rb.episode_ends, np.cumsum(lengths))
    with h5py.File(src, "r") as f:
        np.testing.assert_array_equal(rb["observations.1"][:], np.concatenate([f["observations_0_1"], f["observations_1_1"]]))
    np.testing.assert_array_equal(meta(rb, "episode.terminated"), [0.0, 1.0])
    assert rb.store.get_attrs("data")["source_attrs"]["version"] == "2.1"


# ------------------------------------------------------------------------------------------ ManiSkill
def write_maniskill(path, ids=(0, 2, 1), entries=None):
    rng = np.random.default_rng(4)
    with h5py.File(path, "w") as f:
        for i in ids:
            t = 3 + i
            g = f.create_group(f"traj_{i}")
            g.create_dataset("actions", data=rng.standard_normal((t, 4)).astype("f4"))
            for k in ("terminated", "truncated", "success", "fail"):
                g.create_dataset(k, data=np.zeros(t, bool))
            g.create_dataset("rewards", data=rng.random(t).astype("f4"))
            g.create_dataset("obs/agent/qpos", data=rng.standard_normal((t + 1, 9)).astype("f4"))
            g.create_dataset("obs/sensor_data/cam/depth", data=rng.integers(0, 60000, (t + 1, 16, 16, 1), dtype=np.uint16))
            g.create_dataset("obs/sensor_data/cam/rgb", data=rng.integers(0, 255, (t + 1, 16, 16, 3), dtype=np.uint8))
            g.create_dataset("env_states/actors/cube", data=rng.standard_normal((t + 1, 13)).astype("f4"))
    entries = entries if entries is not None else [
        {"episode_id": i, "episode_seed": 100 + i, "control_mode": "pd_joint_delta_pos", "elapsed_steps": 3 + i,
         "reset_kwargs": {"seed": 100 + i}} for i in (1, 0, 2)]  # not in file order
    path.with_suffix(".json").write_text(json.dumps({"env_info": {"env_id": "PickCube-v1"}, "episodes": entries}))
    return path


def test_maniskill_matches_the_sidecar_by_episode_id(tmp_path):
    src = write_maniskill(tmp_path / "trajectory.h5")
    report = import_dataset(src, tmp_path / "o.zarr", progress=False)
    assert report.ok and report.format == "maniskill"
    rb = opened(tmp_path / "o.zarr")
    np.testing.assert_array_equal(meta(rb, "source_episode_index"), [0, 1, 2])
    per = episode_attrs(rb)
    assert [p["episode"]["episode_seed"] for p in per] == [100, 101, 102]
    with h5py.File(src, "r") as f:
        for key, path in (("obs.agent.qpos", "obs/agent/qpos"), ("obs.sensor_data.cam.depth", "obs/sensor_data/cam/depth"),
                          ("env_states.actors.cube", "env_states/actors/cube")):
            np.testing.assert_array_equal(rb[key][:], np.concatenate([f[f"traj_{i}"][path][:-1] for i in (0, 1, 2)]))
            np.testing.assert_array_equal(meta(rb, f"final.{key}"), np.stack([f[f"traj_{i}"][path][-1] for i in (0, 1, 2)]))
    assert rb["obs.sensor_data.cam.depth"].dtype == np.uint16
    assert "webp" not in str(rb.get_compressors()["obs.sensor_data.cam.depth"]).lower()
    assert "webp" in str(rb.get_compressors()["obs.sensor_data.cam.rgb"]).lower()
    assert rb.store.get_attrs("data")["source_attrs"]["env_info"] == {"env_id": "PickCube-v1"}
    bad = write_maniskill(tmp_path / "bad.h5", entries=[{"episode_id": 7}])
    with pytest.raises(ValueError, match=r"bad.json: episode_id\(s\) \[7\] have no traj_N group"):
        import_dataset(bad, tmp_path / "p.zarr", progress=False)


def test_the_cli_guesses_each_hdf5_format(tmp_path):
    import subprocess
    import sys

    write_robomimic(tmp_path / "r.hdf5")
    write_maniskill(tmp_path / "m.h5")
    for src, name in ((tmp_path / "r.hdf5", "robomimic"), (tmp_path / "m.h5", "maniskill")):
        r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "import", str(src), str(tmp_path / f"{name}.zarr"),
                            "--no-progress"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert f"({name})" in r.stdout
    r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "import", "maniskill", str(tmp_path / "m.h5"),
                        str(tmp_path / "x.zarr"), "--drop-next-obs"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--drop-next-obs is an option of the robomimic format, not of maniskill" in r.stderr


# ------------------------------------------------------------------------------------------ break-it findings
def test_a_d4rl_style_file_keeps_every_step_dataset_and_splits_at_timeouts(tmp_path):
    n = 30
    rng = np.random.default_rng(5)
    src = tmp_path / "d4rl.hdf5"
    terminals, timeouts = np.zeros(n, bool), np.zeros(n, bool)
    terminals[7], timeouts[[14, 29]] = True, True
    with h5py.File(src, "w") as f:
        f.create_dataset("observations", data=rng.standard_normal((n, 3)))
        f.create_dataset("next_observations", data=rng.standard_normal((n, 3)))
        f.create_dataset("actions", data=rng.standard_normal((n, 2)).astype("f4"))
        f.create_dataset("rewards", data=rng.random(n))
        f.create_dataset("terminals", data=terminals)
        f.create_dataset("timeouts", data=timeouts)
        f.create_dataset("infos/qpos", data=rng.standard_normal((n, 5)))
    report = import_dataset(src, tmp_path / "o.zarr", progress=False)
    assert report.ok
    rb = opened(tmp_path / "o.zarr")
    np.testing.assert_array_equal(rb.episode_ends, [8, 15, 30])
    with h5py.File(src, "r") as f:
        np.testing.assert_array_equal(rb["next_observations"][:], f["next_observations"][()])
        np.testing.assert_array_equal(rb["infos.qpos"][:], f["infos/qpos"][()])
    assert "next_observations" not in rb.store.get_attrs("data")["source_attrs"]


def test_robomimic_num_samples_must_match_the_datasets(tmp_path):
    src = tmp_path / "r.hdf5"
    with h5py.File(src, "w") as f:
        for i in range(2):
            g = f.create_group(f"data/demo_{i}")
            g.attrs["num_samples"] = 9
            g.create_dataset("actions", data=np.zeros((10, 2)))
    with pytest.raises(ValueError, match=r"demo_0/actions has 10 rows but the episode has 9 steps"):
        import_dataset(src, tmp_path / "o.zarr", progress=False)
    with h5py.File(src, "a") as f:
        for i in range(2):
            f[f"data/demo_{i}"].attrs["num_samples"] = 3
    with pytest.raises(ValueError, match=r"no dataset has one row per step: demo_0 has 3 steps"):
        import_dataset(src, tmp_path / "o.zarr", progress=False)


def test_drop_next_obs_keeps_the_last_row_and_says_so(tmp_path):
    src = write_robomimic(tmp_path / "r.hdf5")
    report = import_dataset(src, tmp_path / "o.zarr", progress=False, format_options={"drop_next_obs": True})
    assert report.ok and any("next_obs left out" in n for n in report.notes)
    rb = opened(tmp_path / "o.zarr")
    with h5py.File(src, "r") as f:
        np.testing.assert_array_equal(meta(rb, "final.next_obs.pos"),
                                      np.stack([f["data"][d]["next_obs/pos"][-1] for d in ("demo_0", "demo_2", "demo_9", "demo_10")]))


def test_more_malformed_files_are_named(tmp_path):
    # d3rlpy v2: a column of another length in one episode
    src = tmp_path / "v2.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("columns", data=[b"observations", b"rewards"])
        f.create_dataset("num_episodes", data=2)
        for i, t in enumerate([5, 6]):
            f.create_dataset(f"observations_{i}", data=np.zeros((t, 2)))
            f.create_dataset(f"rewards_{i}", data=np.zeros((5, 1)))
    with pytest.raises(ValueError, match=r"episode 1's datasets differ in length: observations_1 6, rewards_1 5"):
        import_dataset(src, tmp_path / "o.zarr", progress=False)
    # ManiSkill: two sidecar entries for one trajectory
    ms = write_maniskill(tmp_path / "m.h5", entries=[{"episode_id": 1}, {"episode_id": 1}])
    with pytest.raises(ValueError, match="episode_id 1 has two entries"):
        import_dataset(ms, tmp_path / "o.zarr", progress=False)
    # Minari: a Dict observation member with T rows instead of T + 1
    root = tmp_path / "mi"
    (root / "data").mkdir(parents=True)
    with h5py.File(root / "data/main_data.hdf5", "w") as f:
        g = f.create_group("episode_0")
        g.create_dataset("actions", data=np.zeros((4, 1)))
        g.create_dataset("observations/pos", data=np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"episode_0/observations/pos has 4 rows for 4 actions"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    # a dtype no store holds: refused, naming the option that leaves it out
    rb_src = write_robomimic(tmp_path / "s.hdf5", extra=lambda g, t: g.create_dataset("obs/tag", data=np.array([b"ab"] * t, dtype="S2")))
    with pytest.raises(ValueError, match=r"key 'obs.tag' holds dtype \|S2.*--skip-key obs.tag"):
        import_dataset(rb_src, tmp_path / "o.zarr", progress=False)
    assert import_dataset(rb_src, tmp_path / "o.zarr", progress=False, skip_keys=["obs.tag"]).ok
    # d3rlpy v1 without a single terminal flag: nothing to import, said plainly
    v1 = tmp_path / "v1.h5"
    with h5py.File(v1, "w") as f:
        f.create_dataset("observations", data=np.zeros((6, 2)))
        f.create_dataset("actions", data=np.zeros((6, 1)))
        f.create_dataset("terminals", data=np.zeros(6))
    with pytest.raises(ValueError, match="nothing to import"):
        import_dataset(v1, tmp_path / "p.zarr", progress=False)
    assert not (tmp_path / "p.zarr").exists()


def test_d3rlpy_nan_flags_and_an_undercounted_num_episodes_are_refused_by_name(tmp_path):
    """A NaN terminal flag is no episode end (``astype(bool)`` read it as one), and episodes past
    ``num_episodes`` are not dropped silently: both refused, naming the dataset, before any write."""
    v1 = tmp_path / "v1.h5"
    terminals = np.zeros(8)
    terminals[[2, 7]] = 1
    terminals[5] = np.nan
    with h5py.File(v1, "w") as f:
        f.create_dataset("observations", data=np.zeros((8, 2)))
        f.create_dataset("actions", data=np.zeros((8, 1)))
        f.create_dataset("terminals", data=terminals)
    with pytest.raises(ValueError, match=r"dataset terminals holds nan at row 5 \(1 such rows\)"):
        import_dataset(v1, tmp_path / "o.zarr", progress=False)
    with h5py.File(v1, "a") as f:  # the same file with the flag fixed imports, split at its flags
        f["terminals"][5] = 0
    assert import_dataset(v1, tmp_path / "o.zarr", progress=False).ok
    np.testing.assert_array_equal(opened(tmp_path / "o.zarr").episode_ends, [3, 8])
    v2 = tmp_path / "v2.h5"
    with h5py.File(v2, "w") as f:
        f.create_dataset("columns", data=[b"observations", b"rewards"])
        f.create_dataset("num_episodes", data=2)
        for i in range(3):  # three episodes written, two counted
            f.create_dataset(f"observations_{i}", data=np.zeros((4, 2)))
            f.create_dataset(f"rewards_{i}", data=np.zeros((4, 1)))
    with pytest.raises(ValueError, match="num_episodes is 2 but dataset observations_2 holds an episode past it"):
        import_dataset(v2, tmp_path / "p.zarr", progress=False)
    assert not (tmp_path / "p.zarr").exists()


def test_a_truncated_hdf5_file_is_named_as_damaged_not_unrecognised(tmp_path, capsys):
    from replaybuf_core.cli import main
    from replaybuf_core.errors import DamagedSourceError

    whole = write_robomimic(tmp_path / "whole.hdf5")
    raw = whole.read_bytes()
    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(raw[: len(raw) // 2])  # a download cut short: the signature is there, the rest is not
    with pytest.raises(DamagedSourceError, match=r"cut.hdf5: an HDF5 file .* truncated or damaged"):
        import_dataset(cut, tmp_path / "o.zarr", progress=False)
    assert main(["import", str(cut), str(tmp_path / "o.zarr"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "truncated or damaged" in err and "no installed import format recognises it" not in err
    assert not (tmp_path / "o.zarr").exists()


def test_hdf5_backend_stores_read_back_and_keep_per_episode_text(tmp_path):
    pytest.importorskip("replaybuf_hdf5")
    src = write_robomimic(tmp_path / "r.hdf5", extra=lambda g, t: g.create_dataset("lang", data="pick it",
                                                                                   dtype=h5py.string_dtype()))
    report = import_dataset(src, tmp_path / "o.h5", progress=False, backend="hdf5")
    assert report.ok, report.summary()
    import subprocess
    import sys

    code = ("from replaybuf_core import ReplayBuffer; rb = ReplayBuffer.create_from_path(%r); "
            "print(rb['actions'][:].sum(), list(rb.store.read('meta', 'episode.lang', 0, 4)))" % str(tmp_path / "o.h5"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)  # a fresh process
    assert r.returncode == 0, r.stderr
    assert "'pick it'" in r.stdout


def test_robomimic_demos_of_one_number_are_refused_by_name(tmp_path):
    """demo_1 and demo_01 (a break-it trial's file): which comes first, and which one a mask names, was
    ambiguous; now refused, naming both, with nothing written."""
    src = tmp_path / "dup.hdf5"
    with h5py.File(src, "w") as f:
        for name in ("demo_0", "demo_1", "demo_01"):
            g = f.create_group(f"data/{name}")
            g.attrs["num_samples"] = 3
            g.create_dataset("actions", data=np.zeros((3, 2), np.float32))
            g.create_dataset("obs/x", data=np.zeros((3, 1), np.float32))
    with pytest.raises(ValueError, match=r"data/demo_01 and data/demo_1 are both demo number 1"):
        import_dataset(src, tmp_path / "o.zarr", "robomimic", progress=False)
    assert not (tmp_path / "o.zarr").exists()


def test_a_mask_naming_a_demo_twice_and_a_sidecar_step_count_that_disagrees_are_said(tmp_path, capsys):
    """robomimic: ``mask/train`` naming demo_9 twice imports (membership is clear) with a note naming the
    filter and demo; the mask marks it once (against the demo list read with h5py). ManiSkill: a sidecar
    ``elapsed_steps`` other than the trajectory's actions is noted naming the trajectory and both
    numbers; the trajectory's own rows are imported."""
    from replaybuf_core.cli import main

    src = write_robomimic(tmp_path / "r.hdf5")
    with h5py.File(src, "a") as f:
        del f["mask/train"]
        f["mask/train"] = np.array([b"demo_0", b"demo_9", b"demo_10", b"demo_9"])
    assert main(["import", str(src), str(tmp_path / "r.zarr"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "note: mask/train names ['demo_9'] more than once (4 entries, 3 demos)" in out, out
    assert "meta/mask.train (one bool a demo) marks it once" in out
    np.testing.assert_array_equal(meta(opened(tmp_path / "r.zarr"), "mask.train"), [True, False, True, True])

    entries = [{"episode_id": i, "elapsed_steps": 3 + i + (4 if i == 2 else 0)} for i in (0, 1, 2)]
    src = write_maniskill(tmp_path / "m.h5", entries=entries)
    assert main(["import", str(src), str(tmp_path / "m.zarr"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert ("note: m.json: elapsed_steps disagrees with the trajectory's actions in 1 of 3 trajectories (traj_2: "
            "elapsed_steps 9, 5 actions)") in out, out
    with h5py.File(src, "r") as f:
        lengths = [f[f"traj_{i}/actions"].shape[0] for i in (0, 1, 2)]
    np.testing.assert_array_equal(opened(tmp_path / "m.zarr").episode_ends, np.cumsum(lengths))
    src = write_maniskill(tmp_path / "ok.h5")  # counts that agree: nothing said
    assert main(["import", str(src), str(tmp_path / "ok.zarr"), "--no-progress"]) == 0
    assert "elapsed_steps" not in capsys.readouterr().out
