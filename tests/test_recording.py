"""Recording frame by frame (issue 34): the store holds exactly the saved episodes' frames (against a
model: the frames the loop handed in), bad frames are refused by key and index with the episode going
on, a slow encoder makes add_frame block and warn but never drop, and a SIGKILL loses at most the
episode in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.recording import Recorder, RecorderLagWarning


def _frame(e: int, i: int) -> dict[str, np.ndarray]:
    """A deterministic frame: a 16x16 camera, a 3-D state, a scalar reward."""
    y, x = np.mgrid[0:16, 0:16]
    cam = np.stack([(x * 8 + i * 3) % 256, (y * 8 + e * 40) % 256, (x + y + i) % 256], -1).astype(np.uint8)
    return {"cam": cam, "state": np.array([e, i, e * i], np.float32), "reward": np.float64(i / 10)}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.integers(1, 25), st.booleans()), min_size=1, max_size=5))
def test_the_store_holds_exactly_the_saved_episodes(tmp_path_factory, plan):
    path = tmp_path_factory.mktemp("rec") / "rec.zarr"
    model = []
    with Recorder(path, fps=20, frames="exact") as rec:
        for e, (n, keep) in enumerate(plan):
            frames = [_frame(e, i) for i in range(n)]
            for i, f in enumerate(frames):
                rec.add_frame(f, timestamp=100 + i / 20)
            if keep:
                report = rec.save_episode()
                assert report.frames == n and report.index == len(model)
                model.append(frames)
            else:
                assert rec.discard_episode() == n
    with ReplayBuffer.create_from_path(path) as rb:
        assert rb.n_episodes == len(model)
        assert rb.episode_lengths.tolist() == [len(m) for m in model]
        assert rb.store.get_attrs("data")["fps"] == 20
        for j, frames in enumerate(model):
            got = rb.get_episode(j)
            for key in ("cam", "state", "reward"):
                np.testing.assert_array_equal(got[key], np.stack([f[key] for f in frames]), err_msg=key)
            np.testing.assert_allclose(got["timestamp"], np.arange(len(frames)) / 20, atol=1e-6)


def test_bad_frames_are_refused_by_key_and_index_and_the_episode_goes_on(tmp_path):
    path = tmp_path / "rec.zarr"
    with Recorder(path, fps=10, frames="exact") as rec:
        rec.add_frame(_frame(0, 0), timestamp=0.0)
        rec.save_episode()  # episode 0 is safe from what follows
        rec.add_frame(_frame(1, 0), timestamp=0.0)
        bad = [({**_frame(1, 1), "cam": np.zeros((16, 16, 4), np.uint8)}, r"frame 1: key 'cam' is uint8 \(16, 16, 4\)"),
               ({**_frame(1, 1), "state": np.zeros(3, np.float64)}, r"frame 1: key 'state' is float64"),
               ({k: v for k, v in _frame(1, 1).items() if k != "reward"}, r"frame 1: keys differ.*missing \['reward'\]"),
               ({**_frame(1, 1), "extra": 1}, r"frame 1: keys differ.*extra \['extra'\]"),
               ({**_frame(1, 1), "timestamp": 3}, r"frame 1: 'timestamp' is the recorder's own key")]
        for frame, match in bad:
            with pytest.raises(ValueError, match=match):
                rec.add_frame(frame, timestamp=0.1)
        with pytest.raises(ValueError, match="frame 1: timestamp nan"):
            rec.add_frame(_frame(1, 1), timestamp=float("nan"))
        with pytest.raises(ValueError, match=r"frame 1: timestamp 0.0 s does not come after"):
            rec.add_frame(_frame(1, 1), timestamp=0.0)
        rec.add_frame(_frame(1, 1), timestamp=0.1)
        assert rec.save_episode().frames == 2
        with pytest.raises(ValueError, match="no frame was added"):
            rec.save_episode()
    with ReplayBuffer.create_from_path(path) as rb:
        assert rb.episode_lengths.tolist() == [1, 2]
        np.testing.assert_array_equal(rb["state"][1:], np.stack([_frame(1, 0)["state"], _frame(1, 1)["state"]]))


def test_an_exception_in_the_loop_keeps_every_saved_episode(tmp_path):
    path = tmp_path / "rec.zarr"
    with pytest.raises(RuntimeError, match="camera unplugged"):
        with Recorder(path, fps=10, frames="exact") as rec:
            for e in range(2):
                for i in range(5):
                    rec.add_frame(_frame(e, i), timestamp=i / 10)
                rec.save_episode()
            rec.add_frame(_frame(2, 0), timestamp=0.0)
            raise RuntimeError("camera unplugged")
    with ReplayBuffer.create_from_path(path) as rb:  # the episode in progress was discarded, nothing else
        assert rb.episode_lengths.tolist() == [5, 5]
        assert all(rb.store.shape("data", k)[0] == 10 for k in rb.keys())


def test_a_slow_encoder_blocks_add_frame_and_warns_but_drops_nothing(tmp_path, monkeypatch):
    from replaybuf_core.store.writer import EpisodeWriter

    real = EpisodeWriter.add_steps

    def slow(self, data, copy=True):
        time.sleep(0.05)  # an encoder slower than the frames come
        return real(self, data, copy)

    monkeypatch.setattr(EpisodeWriter, "add_steps", slow)
    path = tmp_path / "rec.zarr"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(path, fps=50, frames="exact", queue_seconds=0.1) as rec:
            for i in range(60):
                rec.add_frame(_frame(0, i), timestamp=i / 50)
            assert rec.max_lag_frames == 5  # the queue (0.1 s at 50 fps) filled
            rec.save_episode()
    assert sum(issubclass(w.category, RecorderLagWarning) for w in caught) == 1
    assert "never dropped" in str(next(w.message for w in caught if w.category is RecorderLagWarning))
    with ReplayBuffer.create_from_path(path) as rb:
        assert rb.n_steps == 60
        np.testing.assert_array_equal(rb["state"][:, 1], np.arange(60))


@pytest.mark.parametrize("fps, writer_options, shard", [(20, None, 20), (7.6, None, 8), (1000, None, 256),
                                                           (20, {"frames_per_shard": 64}, 64)])
def test_cameras_are_sharded_about_a_second_a_shard(tmp_path, fps, writer_options, shard):
    """A save encodes the frames of the last partial shards: shards of about a second of frames (as
    zarr.json says, read as JSON) keep that short; numbers and explicit options are left alone."""
    import json

    path = tmp_path / "rec.zarr"
    with Recorder(path, fps=fps, frames="fast", writer_options=writer_options) as rec:
        for i in range(45):
            rec.add_frame(_frame(0, i), timestamp=i / fps)
        rec.save_episode()
    meta = json.loads((path / "data/cam/zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"][0] == shard
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    assert json.loads((path / "data/state/zarr.json").read_text())["codecs"][0]["name"] != "sharding_indexed"
    with ReplayBuffer.create_from_path(path) as rb:
        np.testing.assert_array_equal(rb["state"][:, 1], np.arange(45))


def test_an_irregular_frame_rate_is_reported_not_corrected(tmp_path):
    times = [0.0, 0.1, 0.2, 0.5, 0.6]  # one frame came 0.3 s late at 10 fps
    with Recorder(tmp_path / "rec.zarr", fps=10, frames="exact") as rec:
        for i, t in enumerate(times):
            rec.add_frame(_frame(0, i), timestamp=t)
        with pytest.warns(RuntimeWarning, match=r"1 of 4 frame intervals.*worst 300.0 ms, before frame 3"):
            report = rec.save_episode()
    assert (report.off_rate, report.worst_frame) == (1, 3)
    with ReplayBuffer.create_from_path(tmp_path / "rec.zarr") as rb:
        np.testing.assert_allclose(rb["timestamp"][:], times, atol=1e-6)


def test_appending_to_a_store_checks_its_keys_and_fps(tmp_path):
    path = tmp_path / "rec.zarr"
    with Recorder(path, fps=10, frames="exact") as rec:
        rec.add_frame(_frame(0, 0), timestamp=0.0)
        rec.save_episode()
    with pytest.raises(ValueError, match="records at 10.0 fps"):
        Recorder(path, fps=30)
    with Recorder(path, fps=10) as rec:  # the stored keys keep their codecs
        with pytest.raises(ValueError, match=r"frame 0: keys .* differ from the store's.*missing \['reward'\]"):
            rec.add_frame({k: v for k, v in _frame(1, 0).items() if k != "reward"})
        rec.add_frame(_frame(1, 0))
        rec.save_episode()
    with ReplayBuffer.create_from_path(path) as rb:
        assert rb.n_episodes == 2 and rb.store.codec("data", "cam").__class__.__name__ == "WebPCodec"


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_recording import _frame
    from replaybuf_core.recording import Recorder
    rec = Recorder({path!r}, fps=30, frames="exact")
    for e in range(1000):
        for i in range(40):
            rec.add_frame(_frame(e, i), timestamp=i / 30)
            time.sleep(0.005)
        rec.save_episode()
        print("saved", e, flush=True)
""")


def test_sigkill_while_recording_loses_at_most_the_episode_in_flight(tmp_path):
    path = tmp_path / "rec.zarr"
    code = CHILD.format(tests=os.path.dirname(__file__), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    saved = -1
    try:
        for line in proc.stdout:
            saved = int(line.split()[1])
            if saved == 3:
                time.sleep(0.1)  # mid-way through episode 4 (40 frames, about 0.2 s)
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        saved = max([saved] + [int(line.split()[1]) for line in proc.stdout])  # what it said before dying
        proc.stdout.close()
    assert saved >= 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the rows of the episode in flight, dropped
        rb = ReplayBuffer(path)  # writable: an interrupted append is trimmed
    with rb:
        # every episode it reported saved; one more only if the kill fell between a commit and its print
        assert rb.n_episodes in (saved + 1, saved + 2)
        for e in range(rb.n_episodes):
            np.testing.assert_array_equal(rb.get_episode(e)["state"], np.stack([_frame(e, i)["state"] for i in range(40)]))


def test_record_episodes_keeps_every_step_and_the_final_observation_of_cartpole(tmp_path):
    gym = pytest.importorskip("gymnasium")
    from replaybuf_core.recording.gym import RecordEpisodes

    path = tmp_path / "cartpole.zarr"
    bare = gym.make("CartPole-v1", max_episode_steps=30)  # the same seeds, stepped without the wrapper
    env = RecordEpisodes(gym.make("CartPole-v1", max_episode_steps=30), path)
    assert isinstance(env, gym.Wrapper) and env.observation_space == bare.observation_space
    expected = []  # (obs, action, reward, terminated, truncated) rows and the final observation, per episode
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        ref_obs, _ = bare.reset(seed=seed)
        np.testing.assert_array_equal(obs, ref_obs)
        rows, done = [], False
        while not done:
            action = int(seed + len(rows)) % 2
            obs, reward, term, trunc, _ = env.step(action)
            rows.append((ref_obs, action, reward, term, trunc))
            ref_obs, *_ = bare.step(action)
            done = term or trunc
        expected.append((rows, ref_obs))
    env.reset(seed=99)  # a reset with nothing recorded since: no empty episode
    for _ in range(3):
        env.step(0)  # an episode that never ends: close() drops it
    env.close()
    with ReplayBuffer.create_from_path(path) as rb:
        assert rb.n_episodes == 4
        assert sorted(rb.keys()) == ["actions", "observations", "rewards", "terminations", "timestamp", "truncations"]
        for e, (rows, final) in enumerate(expected):
            got = rb.get_episode(e)
            np.testing.assert_array_equal(got["observations"], np.stack([r[0] for r in rows]))
            np.testing.assert_array_equal(got["actions"], [r[1] for r in rows])
            np.testing.assert_array_equal(got["rewards"], [r[2] for r in rows])
            np.testing.assert_array_equal(got["terminations"], [r[3] for r in rows])
            np.testing.assert_array_equal(got["truncations"], [r[4] for r in rows])
            assert got["terminations"][-1] or got["truncations"][-1]
        assert rb.store.get_attrs("data")["fps"] == bare.metadata["render_fps"]
    finals = zarr.open_array(path / "meta" / "final.observations", mode="r")[:]  # read by zarr-python itself
    np.testing.assert_array_equal(finals, np.stack([final for _, final in expected]))


def test_record_episodes_refuses_a_vector_env_and_names_a_missing_info_key(tmp_path):
    gym = pytest.importorskip("gymnasium")
    from replaybuf_core.recording.gym import RecordEpisodes

    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    with pytest.raises(TypeError, match="records one environment"):
        RecordEpisodes(vec, tmp_path / "v.zarr")
    vec.close()
    assert not (tmp_path / "v.zarr").exists()
    env = RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "c.zarr", info_keys=["contact"])
    env.reset(seed=0)
    with pytest.raises(KeyError, match=r"step 0 of the episode: info has no 'contact'"):
        env.step(0)
    env.close()


def test_statistics_stay_incremental_while_recording(tmp_path, monkeypatch):
    """Recording computes no statistics; get_stats afterwards reads only the episodes recorded since
    its last save (here: 2 of 5), and gives what numpy gives on all steps."""
    import replaybuf_core.store.stored_stats as stored_stats

    path = tmp_path / "rec.zarr"
    with Recorder(path, fps=10, frames="exact") as rec:
        for e in range(3):
            for i in range(6 + e):
                rec.add_frame(_frame(e, i), timestamp=i / 10)
            rec.save_episode()
    with ReplayBuffer(path) as rb:
        rb.get_stats(["state"])  # computed and saved
    read = []
    real = stored_stats.summarize
    monkeypatch.setattr(stored_stats, "summarize", lambda b, keys, first, stop: read.append((first, stop)) or
                        real(b, keys, first, stop))
    with Recorder(path, fps=10) as rec:
        for e in range(3, 5):
            for i in range(4):
                rec.add_frame(_frame(e, i), timestamp=i / 10)
            rec.save_episode()
    assert read == []  # recording itself summarised nothing
    with ReplayBuffer(path) as rb:
        stats = rb.get_stats(["state"])["state"]
    assert read == [(3, 5)]
    states = np.concatenate([np.stack([_frame(e, i)["state"] for i in range(n)])
                             for e, n in enumerate([6, 7, 8, 4, 4])])
    np.testing.assert_allclose(stats["mean"], states.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["std"], states.std(0), rtol=1e-5)
    np.testing.assert_array_equal(stats["max"], states.max(0))


def test_a_second_recorder_on_one_store_in_one_process_is_refused_at_construction(tmp_path):
    """Two recorders of one process on one store would both write its episodes (the writer lock only
    keeps other processes out): the second is refused when it is made — by path, by another spelling
    of the path, through a symlink, or on the buffer the first one records into — and nothing of it
    reaches the store; once the first is closed a new one records (the store read back with zarr)."""
    from replaybuf_core.errors import StoreLockedError

    path = tmp_path / "rec.zarr"
    os.symlink(tmp_path, tmp_path / "link")
    first = Recorder(path, fps=10)
    for spelling in (path, f"{path}/", str(tmp_path / "." / "rec.zarr"), tmp_path / "link" / "rec.zarr", first.rb):
        with pytest.raises(StoreLockedError, match="another Recorder of this process is recording into"):
            Recorder(spelling, fps=10)
    other = Recorder(tmp_path / "other.zarr", fps=10)  # another store is fine
    other.close()
    for i in range(3):
        first.add_frame({"x": np.float32([i])}, timestamp=i / 10)
    assert first.save_episode().frames == 3
    first.close()
    with Recorder(path, fps=10) as again:
        for i in range(2):
            again.add_frame({"x": np.float32([10 + i])}, timestamp=i / 10)
        again.save_episode()
    g = zarr.open_group(str(path), mode="r")
    assert g["meta/episode_ends"][:].tolist() == [3, 5]
    assert g["data/x"][:, 0].tolist() == [0, 1, 2, 10, 11]
    buffer = ReplayBuffer(str(path))  # a buffer handed in is claimed too, and freed at close
    with Recorder(buffer, fps=10):
        with pytest.raises(StoreLockedError):
            Recorder(path, fps=10)
    Recorder(buffer, fps=10).close()
    buffer.close()


@pytest.mark.parametrize("then", ["next", "discard"])
def test_the_next_episode_is_not_checked_against_arrays_the_writer_is_still_creating(tmp_path, then):
    """``save_episode(wait=False)`` then the next episode at once (RecordEpisodes does this): while the
    writer thread was still creating the new store's arrays, the next first frame was compared with
    the keys created so far and refused ("keys [...] differ from the store's [two of them]": a CI
    flake).  Here each array's creation takes 0.5 s and the next episode starts after two exist."""
    rb = ReplayBuffer.create_empty("zarr", str(tmp_path / "rec.zarr"))
    store = rb.store
    real = store.create_array

    def slow_create(group, name, *args, **kwargs):
        if group == "data":
            time.sleep(0.5)
        return real(group, name, *args, **kwargs)

    store.create_array = slow_create
    frames = [{"a": np.float32(i), "b": np.int64(i), "c": np.zeros(2, np.float32) + i, "d": np.bool_(i % 2),
               "e": np.float64(-i)} for i in range(6)]
    with Recorder(rb, fps=10) as rec:
        for i in range(3):
            rec.add_frame(frames[i], timestamp=i / 10)
        rec.save_episode(wait=False)
        if then == "discard":  # nothing to discard: it returns at once, before the arrays exist
            assert rec.discard_episode() == 0
        time.sleep(1.25)  # "timestamp" and two data keys exist, three more are being made
        for i in range(3, 6):
            rec.add_frame(frames[i], timestamp=(i - 3) / 10)
        rec.save_episode()
    with ReplayBuffer.create_from_path(tmp_path / "rec.zarr") as back:
        assert back.episode_lengths.tolist() == [3, 3]
        for k in "abcde":
            np.testing.assert_array_equal(back[k][:], np.stack([f[k] for f in frames]))
