"""Stores whose camera keys use a lossy codec (JPEG — ``--frames fast`` —, video): copies, conversions
and edits keep the stored frame statistics true to the written pixels (``replaybuf verify`` passes),
lossless conversions keep them as they were, and edits move kept frames as stored bytes (0 re-encoded, bit for bit; a backend
that cannot re-encodes as few kept frames as the chunk grid allows and says how many, with their worst
PSNR).

Expected values come from another path than the code under test: pixels read through zarr-python
(``zarr.open_group``), histograms counted here with ``np.bincount``, PSNR computed here.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.inspection.verify import verify_store
from replaybuf_core.store import editing
from replaybuf_core.store.stored_stats import RECORD

pytest.importorskip("imagecodecs")

SIDE = 16


def _frames(n: int, seed: int) -> np.ndarray:
    """``n`` smooth 16x16 RGB frames with some noise (lossy codecs change them a little)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    base = np.stack([x * 12, y * 12, (x + y) * 6], axis=-1).astype(np.float64)
    out = base[None] + rng.normal(0, 20, (n, SIDE, SIDE, 3)) + rng.integers(0, 60, (n, 1, 1, 3))
    return np.clip(out, 0, 255).astype(np.uint8)


def _build(path, lengths, frames="img=exact", stats=True):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    with rb.writer(frames=frames) as w:
        for i, n in enumerate(lengths):
            w.add_episode({"img": _frames(n, seed=i), "x": np.arange(n, dtype=np.float32) + 100 * i})
    if stats:
        rb.get_stats()  # stored statistics, which the copies and edits below must keep true
    rb.close()
    return path


def _pixels(path) -> np.ndarray:
    return zarr.open_group(str(path), mode="r")["data/img"][:]


def _hist(frames: np.ndarray) -> np.ndarray:
    return np.stack([np.bincount(frames[..., c].ravel(), minlength=256) for c in range(frames.shape[-1])])


def _stored_hist(path) -> np.ndarray:
    return zarr.open_group(str(path), mode="r")["meta/_stats.img.hist"][:]


def _entry(path) -> dict:
    return dict(zarr.open_group(str(path), mode="r")["meta"].attrs[RECORD]["keys"]["img"])


def _errors(path) -> list[str]:
    return [str(p) for p in verify_store(path) if p.level == "error"]


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2, axis=(1, 2, 3))
    return math.inf if mse.max() == 0 else float(10 * np.log10(255.0 ** 2 / mse.max()))


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    """A lossless (JPEG XL) store with stored statistics: 4 episodes, 37 steps."""
    return _build(tmp_path_factory.mktemp("exact") / "exact.zarr", [9, 10, 7, 11])


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory):
    """The same episodes as JPEG frames (one frame a chunk, shards of whole frames)."""
    return _build(tmp_path_factory.mktemp("jpeg") / "jpeg.zarr", [9, 10, 7, 11], frames="img=fast")


# ------------------------------------------------------------------ copies and conversions

def test_a_lossy_copy_recounts_the_frame_statistics(exact, tmp_path, capsys):
    dst = tmp_path / "fast.zarr"
    assert main(["copy", str(exact), str(dst), "--frames", "fast"]) == 0
    pixels = _pixels(dst)
    assert not np.array_equal(pixels, _pixels(exact))  # JPEG changed them ...
    np.testing.assert_array_equal(_stored_hist(dst), _hist(pixels))  # ... and the statistics follow
    assert _errors(dst) == []
    assert _entry(dst)["n_episodes"] == 4
    # a plain copy of a lossy store writes every frame through JPEG again: recounted too
    again = tmp_path / "again.zarr"
    assert main(["copy", str(dst), str(again)]) == 0
    np.testing.assert_array_equal(_stored_hist(again), _hist(_pixels(again)))
    assert _errors(again) == []


def test_a_lossless_copy_keeps_the_statistics_as_they_were(exact, tmp_path):
    dst = tmp_path / "webp.zarr"
    assert main(["copy", str(exact), str(dst), "--frames", "webp"]) == 0
    np.testing.assert_array_equal(_pixels(dst), _pixels(exact))
    assert _entry(dst) == _entry(exact)  # nothing recounted: the same entry, digest and all
    assert _errors(dst) == []


def test_a_lossy_conversion_in_place_recounts_and_a_lossless_one_keeps(exact, tmp_path, capsys):
    path = tmp_path / "s.zarr"
    shutil.copytree(exact, path)
    assert main(["rechunk", str(path), "--frames", "webp"]) == 0
    assert _entry(path) == _entry(exact)
    assert main(["rechunk", str(path), "--frames", "fast"]) == 0
    np.testing.assert_array_equal(_stored_hist(path), _hist(_pixels(path)))
    assert _errors(path) == []
    with ReplayBuffer(str(path)) as rb:  # the statistics served are those of the JPEG pixels
        got = rb.get_stats(["img"])["img"]["mean"].ravel()
    np.testing.assert_allclose(got, _pixels(path).reshape(-1, 3).mean(axis=0) / 255, rtol=1e-12)


# ------------------------------------------------------------------ edits

def _delete_last_by_cli(store, tmp_path, capsys):
    """``replaybuf edit delete COPY -1`` on a copy of ``store``: ``(copy, pixels before, printed)``."""
    path = tmp_path / store.name
    shutil.copytree(store, path)
    before = _pixels(path)
    assert main(["edit", "delete", str(path), "-1"]) == 0
    return path, before, capsys.readouterr().out


def test_deleting_the_last_episode_of_a_jpeg_store_reencodes_no_kept_frame(jpeg, tmp_path, capsys):
    path, before, out = _delete_last_by_cli(jpeg, tmp_path, capsys)
    assert "re-encoded" not in out
    np.testing.assert_array_equal(_pixels(path), before[:26])  # every kept frame bit for bit
    assert _errors(path) == []
    np.testing.assert_array_equal(_stored_hist(path), _hist(before[:26]))


def test_deleting_a_middle_episode_of_a_jpeg_store_moves_every_kept_frame_bit_for_bit(jpeg, tmp_path, capsys):
    path = tmp_path / "j.zarr"
    shutil.copytree(jpeg, path)
    before = _pixels(path)
    with ReplayBuffer(str(path)) as rb:
        report = rb.delete_episodes([1])
    after = _pixels(path)
    kept = np.concatenate([before[:9], before[19:]])
    np.testing.assert_array_equal(after, kept)  # every kept frame bit for bit (was: 18 re-encoded, ~35 dB)
    r = report.reencoded["img"]
    assert (r.first_row, r.frames, r.moved) == (9, 0, 18)  # one frame a chunk: the chunks moved whole
    assert report.frames_reencoded == 0
    assert report.n_episodes == (4, 3) and report.n_steps == (37, 27)
    assert "x" not in report.reencoded  # numbers are never re-encoded lossily
    np.testing.assert_array_equal(_stored_hist(path), _hist(after))
    assert _errors(path) == []


def test_the_cli_says_no_frame_was_reencoded(jpeg, tmp_path, capsys):
    path = tmp_path / "j.zarr"
    shutil.copytree(jpeg, path)
    before = _pixels(path)
    assert main(["edit", "trim", str(path), "--episode", "2", "--start", "2"]) == 0
    out = capsys.readouterr().out
    # episode 2 starts at row 19: from there on every frame moved two rows down, as stored
    assert "note: img: 0 frames re-encoded; 16 kept frame(s) moved as stored bytes (rows 19..34 of the edited store" in out
    np.testing.assert_array_equal(_pixels(path), np.concatenate([before[:19], before[21:]]))
    assert _errors(path) == []


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    """Video frames, GOPs of 4 frames a chunk (shards of whole GOPs): 3 episodes, 22 steps."""
    pytest.importorskip("av")
    return _build(tmp_path_factory.mktemp("video") / "v.zarr", [9, 6, 7], frames="img=video:g4")


def test_deleting_the_last_episode_of_a_video_store_reencodes_no_frame(video, tmp_path, capsys):
    path, before, out = _delete_last_by_cli(video, tmp_path, capsys)
    after = _pixels(path)
    # every kept frame bit for bit: the chunk holding the new end is re-cut from its packets (was: its
    # 3 kept frames re-encoded)
    np.testing.assert_array_equal(after, before[:15])
    assert "note: img: 0 frames re-encoded; 3 kept frame(s) moved as stored bytes (rows 12..14" in out
    assert _errors(path) == []
    np.testing.assert_array_equal(_stored_hist(path), _hist(after))


def test_deleting_the_first_episode_of_a_video_store_reencodes_no_frame(video, tmp_path):
    """9 frames go: every later frame moves off its GOP's grid (a shift of 1 in GOPs of 4)."""
    path = tmp_path / "v.zarr"
    shutil.copytree(video, path)
    before = _pixels(path)
    with ReplayBuffer(str(path)) as rb:
        report = rb.delete_episodes([0])
    r = report.reencoded["img"]
    assert (r.first_row, r.frames, r.moved) == (0, 0, 13)
    np.testing.assert_array_equal(_pixels(path), before[9:])
    np.testing.assert_array_equal(_stored_hist(path), _hist(before[9:]))
    assert _errors(path) == []


def _video_model_edits(data, model: list[np.ndarray], rb: ReplayBuffer) -> None:
    """One random delete / keep / trim on ``rb`` and on ``model`` (a list of each episode's frames)."""
    kind = data.draw(st.sampled_from(["delete", "keep", "trim"]))
    n = len(model)
    if kind == "delete":
        gone = sorted(set(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n - 1))))
        rb.delete_episodes(gone)
        model[:] = [m for i, m in enumerate(model) if i not in gone]
    elif kind == "keep":
        mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        mask[data.draw(st.integers(0, n - 1))] = True
        rb.keep_episodes(mask)
        model[:] = [m for i, m in enumerate(model) if mask[i]]
    else:
        i = data.draw(st.integers(0, n - 1))
        start = data.draw(st.integers(0, len(model[i]) - 1))
        stop = data.draw(st.integers(start + 1, len(model[i])))
        rb.trim_episode(i, start, stop)
        model[i] = model[i][start:stop]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_edits_of_a_video_store_keep_every_kept_frame_bit_for_bit(video, tmp_path_factory, data):
    """Model: each episode's frames as zarr-python read them before the edits; after a few random
    deletes, keeps and trims the store reads the model's frames exactly, no frame re-encoded."""
    path = tmp_path_factory.mktemp("vm") / "v.zarr"
    shutil.copytree(video, path)
    before = _pixels(path)
    ends = np.asarray(zarr.open_group(str(path), mode="r")["meta/episode_ends"][:])
    model = [before[a:b] for a, b in zip(np.r_[0, ends[:-1]], ends)]
    with ReplayBuffer(str(path)) as rb:
        for _ in range(data.draw(st.integers(1, 3))):
            if len(model) < 2:
                break
            _video_model_edits(data, model, rb)
    np.testing.assert_array_equal(_pixels(path), np.concatenate(model))
    np.testing.assert_array_equal(np.diff(np.r_[0, zarr.open_group(str(path), mode="r")["meta/episode_ends"][:]]),
                                  [len(m) for m in model])
    assert _errors(path) == []


def test_an_interrupted_edit_moving_frames_is_rolled_back_bit_for_bit(jpeg, tmp_path, monkeypatch):
    path = tmp_path / "j.zarr"
    shutil.copytree(jpeg, path)
    before = _pixels(path)
    stats = _entry(path)
    rb = ReplayBuffer(str(path))
    real, died = rb.store.splice_rows, []

    def dying_splice(group, name, start, pieces, src_group=None):
        if name == "img" and editing.pending(rb.store) is not None and not died:
            died.append(start)
            raise KeyboardInterrupt("Ctrl-C mid-rewrite")  # once: the roll-back then moves the rows back
        return real(group, name, start, pieces, src_group)

    monkeypatch.setattr(rb.store, "splice_rows", dying_splice)
    with pytest.raises(KeyboardInterrupt):
        rb.delete_episodes([0])
    monkeypatch.undo()
    rb.close()
    assert died
    np.testing.assert_array_equal(_pixels(path), before)  # the backed-up chunks, as they were stored
    assert _entry(path) == stats  # nothing re-encoded: the statistics stay
    assert _errors(path) == []


def test_an_interrupted_lossy_edit_is_rolled_back_and_its_statistics_stay_true(jpeg, tmp_path, monkeypatch):
    path = tmp_path / "j.zarr"
    shutil.copytree(jpeg, path)
    before = _pixels(path)
    rb = ReplayBuffer(str(path))
    monkeypatch.setattr(rb.store, "can_splice", lambda group, name: False)  # a backend that cannot move bytes
    real, died = rb.store.write, []

    def dying_write(group, name, start, values):
        if group == "data" and name == "img" and editing.pending(rb.store) is not None and not died:
            died.append(start)
            raise KeyboardInterrupt("Ctrl-C mid-rewrite")  # once: the roll-back then writes
        return real(group, name, start, values)

    monkeypatch.setattr(rb.store, "write", dying_write)
    with pytest.raises(KeyboardInterrupt):
        rb.delete_episodes([0])
    monkeypatch.undo()
    rb.close()
    assert _pixels(path).shape == before.shape
    assert not np.array_equal(before, _pixels(path))  # the backed-up pixels, through JPEG once more
    assert _psnr(before, _pixels(path)) > 30
    assert "img" not in zarr.open_group(str(path), mode="r")["meta"].attrs[RECORD]["keys"]  # forgotten
    assert _errors(path) == []  # the statistics of the re-encoded key were forgotten, not left stale
    with ReplayBuffer(str(path)) as rb:
        np.testing.assert_array_equal(_hist(_pixels(path)).sum(axis=1), [37 * SIDE * SIDE] * 3)
        assert rb.get_stats(["img"])["img"]["count"][0] == 37


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.one_of(st.tuples(st.just("delete"), st.integers(0, 9)),
                                st.tuples(st.just("trim"), st.integers(0, 9), st.integers(0, 4))),
                      min_size=1, max_size=3))
def test_frame_statistics_follow_any_edits_of_a_jpeg_store(jpeg, tmp_path_factory, edits):
    """Model: the list of episode lengths; after the edits (each updating the stored statistics
    itself) the stored histogram is the count of the pixels zarr-python reads, and the lengths are
    the model's."""
    path = tmp_path_factory.mktemp("h") / "j.zarr"
    shutil.copytree(jpeg, path)
    model = [9, 10, 7, 11]
    with ReplayBuffer(str(path)) as rb:
        for edit in edits:
            if len(model) < 2:
                break
            i = edit[1] % len(model)
            if edit[0] == "delete":
                rb.delete_episodes([i])
                del model[i]
            else:
                start = min(edit[2], model[i] - 1)
                rb.trim_episode(i, start)
                model[i] -= start
    pixels = _pixels(path)
    assert np.diff(np.r_[0, zarr.open_group(str(path), mode="r")["meta/episode_ends"][:]]).tolist() == model
    np.testing.assert_array_equal(_stored_hist(path), _hist(pixels))
    assert _errors(path) == []


def test_drop_episode_on_a_video_store_keeps_the_statistics_true(video, tmp_path):
    path = tmp_path / "v.zarr"
    shutil.copytree(video, path)
    before = _pixels(path)
    with ReplayBuffer(str(path)) as rb:
        rb.drop_episode()  # the shrink re-encodes the kept frames of the chunk holding the new end
    after = _pixels(path)
    np.testing.assert_array_equal(after[:12], before[:12])
    np.testing.assert_array_equal(_stored_hist(path), _hist(after))
    assert _errors(path) == []
