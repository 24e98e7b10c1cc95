"""Crash safety: recovery of interrupted writes on open, SIGKILL fault injection, ``verify --repair``.

The deterministic tests build each crash state by hand (what zarr leaves when a process dies between
writing an array's ``zarr.json`` and its chunks, or between the renames of a rechunk swap); the
fault-injection tests kill real writer processes (``replaybuf_core.testing.crash``) at random moments.
``python -m benchmarks.soak`` runs the same trials many more times.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import CorruptStoreError, ReadOnlyError
from replaybuf_core.store.recovered_view import RowLimitedArray
from replaybuf_core.store.recovery import recover
from replaybuf_core.testing import assert_buffer_equal, make_episode
from replaybuf_core.testing import crash

CHUNKS = {"obs": (4, 3), "action": (4,)}


def _buffer(path, lengths=(5, 6)):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    eps = [make_episode(n, seed=i) for i, n in enumerate(lengths)]
    for ep in eps:
        rb.add_episode(ep, chunks=CHUNKS)
    return rb, eps


def _interrupt_append(rb, extra=3):
    """What a process killed inside ``add_episode`` leaves: data grown and (partly) written, no commit."""
    n = rb.n_steps
    for key in rb.keys():
        arr = rb.store.get_array("data", key)
        arr.resize((n + extra,) + arr.shape[1:])
        arr[n:n + extra] = 7  # real-looking values in the partial chunk past the commit point


def _interrupt_commit(rb, k=2):
    """What a process killed inside ``_commit_episode_ends`` leaves: zarr.json grown, chunk not written."""
    arr = rb.store.get_array("meta", "episode_ends")
    arr.resize((arr.shape[0] + k,))


def _reopen(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rb = ReplayBuffer(str(path), **kw)
    return rb, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# --------------------------------------------------------------------------------- interrupted append
def test_interrupted_append_trimmed_and_tail_cleared(tmp_path):
    path = tmp_path / "b.zarr"
    rb, eps = _buffer(path)
    _interrupt_append(rb)
    rb.close()
    again, msgs = _reopen(path)
    assert any("3 steps past meta/episode_ends[-1]=11" in m and "dropped" in m for m in msgs), msgs
    assert again.store.shape("data", "obs")[0] == 11 and again.recovery.extra_rows == {"action": 3, "obs": 3}
    # the partial chunk's tail was overwritten: growing again shows the fill value, not the stale 7s
    again.store.resize("data", "obs", 14)
    np.testing.assert_array_equal(again.store.read("data", "obs", 11, 14), np.zeros((3, 3), np.float32))
    again.store.resize("data", "obs", 11)
    assert_buffer_equal(again, eps)
    again.add_episode(make_episode(2, seed=9))
    assert_buffer_equal(again, eps + [make_episode(2, seed=9)])
    again.close()


def test_interrupted_append_hidden_read_only_on_every_read_path(tmp_path):
    path = tmp_path / "b.zarr"
    rb, eps = _buffer(path)
    _interrupt_append(rb)
    rb.close()
    ro, msgs = _reopen(path, read_only=True)
    assert any("hidden (read-only open)" in m for m in msgs), msgs
    assert ro.n_steps == 11 and len(ro) == 11
    assert_buffer_equal(ro, eps)
    assert {k: v.shape[0] for k, v in ro.get_steps_slice(None, None).items()} == {"action": 11, "obs": 11}
    assert [a.shape for a in ro.read_ranges("obs", [0, 9], [2, 11])] == [(2, 3), (2, 3)]
    with pytest.raises(ValueError, match="n_steps=11"):
        ro.read_ranges("obs", [10], [12])
    for key, arr in ro.items():
        assert arr.shape[0] == 11, key
    assert all(v.shape[0] == 11 for v in ro.values())
    from replaybuf_core.store.step_array import StepArray

    view = StepArray(ro, "obs")  # read lazily, as a key over the in-memory limit is
    assert isinstance(view.native, RowLimitedArray) and view.shape == (11, 3) and len(view) == 11
    np.testing.assert_array_equal(np.asarray(view), eps[0]["obs"].tolist() + eps[1]["obs"].tolist())
    np.testing.assert_array_equal(view[-1], eps[1]["obs"][-1])
    np.testing.assert_array_equal(view[..., 0], np.asarray(view)[:, 0])
    assert view[5:100].shape == (6, 3) and view[[0, -1]].shape == (2, 3)
    with pytest.raises(IndexError, match="of 11 steps"):
        view[11]
    with pytest.raises(IndexError, match="11 rows"):
        view.native[11]
    small = ro["obs"]  # a small key of a read-only buffer: loaded into memory, the hidden rows left out
    assert type(small) is np.ndarray and small.shape == (11, 3)
    np.testing.assert_array_equal(small, eps[0]["obs"].tolist() + eps[1]["obs"].tolist())
    with pytest.raises(ReadOnlyError):
        view[0] = 1
    assert ro.store.inner.shape("data", "obs")[0] == 14  # nothing was trimmed on disk


# --------------------------------------------------------------------------------- interrupted commit
def test_interrupted_commit_dropped(tmp_path):
    path = tmp_path / "b.zarr"
    rb, eps = _buffer(path)
    _interrupt_commit(rb, k=2)
    rb.close()
    ro, msgs = _reopen(path, read_only=True)
    assert ro.n_episodes == 2 and any("2 trailing fill value(s)" in m and "hidden" in m for m in msgs)
    assert ro.store.shape("meta", "episode_ends") == (2,)
    again, msgs = _reopen(path)
    assert any("dropped" in m for m in msgs)
    assert again.store.inner.shape("meta", "episode_ends") == (2,) if hasattr(again.store, "inner") else \
        again.store.shape("meta", "episode_ends") == (2,)
    assert_buffer_equal(again, eps)
    again.add_episode(make_episode(3, seed=5))
    assert_buffer_equal(again, eps + [make_episode(3, seed=5)])


def test_negative_episode_end_elsewhere_is_corrupt(tmp_path):
    """Only a *trailing* run of the fill value is an unfinished commit; -1 before a real end is not."""
    path = tmp_path / "b.zarr"
    rb, _ = _buffer(path, lengths=(5, 6, 2))
    rb.store.write("meta", "episode_ends", 1, np.array([-1], np.int64))
    rb.close()
    with pytest.raises(CorruptStoreError, match=r"episode_ends\[1\] is -1"):
        ReplayBuffer(str(path))


def test_short_array_is_never_repaired(tmp_path):
    path = tmp_path / "b.zarr"
    rb, _ = _buffer(path)
    rb.store.get_array("data", "obs").resize((7, 3))
    rb.close()
    for ro in (False, True):
        with pytest.raises(CorruptStoreError, match=r"'obs' has 7 rows but meta/episode_ends\[-1\] is 11"):
            ReplayBuffer(str(path), read_only=ro)


# ---------------------------------------------------------------------------- interrupted rechunk swap
@pytest.mark.parametrize("state", ["copying", "moved_aside", "swapped"])
def test_interrupted_swap(tmp_path, state):
    path = tmp_path / "b.zarr"
    rb, eps = _buffer(path)
    s = rb.store
    s.create_array("data", "_temp.obs", shape=(11, 3), dtype=np.dtype(np.float32), chunks=(8, 3))
    if state in ("moved_aside", "swapped"):
        s.rename_array("data", "obs", "_temp_old.obs")
    if state == "swapped":  # the new array is in place, the backup was not deleted yet
        s.write("data", "_temp.obs", 0, s.read("data", "_temp_old.obs", 0, 11))
        s.rename_array("data", "_temp.obs", "obs")
    rb.close()
    if state == "copying":  # the half-written new array is named, not reported as damage
        from replaybuf_core.inspection.verify import verify_store

        found = verify_store(str(path))
        assert [p for p in found if p.level == "error"] == []
        assert any("data/_temp.obs is the new array of an interrupted rechunk of 'obs'" in p.message for p in found)
    ro, msgs = _reopen(path, read_only=True)
    assert ro.keys() == ["action", "obs"] and msgs
    assert_buffer_equal(ro, eps)
    again, msgs = _reopen(path)
    assert again.keys() == ["action", "obs"] == again.store.list_arrays("data")
    assert_buffer_equal(again, eps)
    again.set_chunks({"obs": (2, 3)})  # rechunking works again
    assert_buffer_equal(again, eps)


def test_debris_of_killed_edits_in_the_versions_group_and_at_the_root_is_removed(tmp_path):
    """What the kills right after a metadata write or deletion left (seen in the sweeps of
    ``file_op_kill``): an undo array half created or half deleted by ``gc`` (a directory without
    ``zarr.json`` in ``versions/``) and zarr's ``*.partial`` temporary files of the versions group's
    and the root's ``zarr.json``.  They stayed for ever, and every listing of the versions group warned
    about them.  A writable open removes them, and nothing at the root that is not the store's own."""
    rb, eps = _buffer(tmp_path / "s.zarr", (5, 6, 7))
    rb.delete_episodes([0])  # a version with an undo
    rb.close()
    root = tmp_path / "s.zarr"
    (root / "versions" / "_temp_ver.7.data.obs" / "c" / "0").mkdir(parents=True)
    (root / "versions" / "_temp_ver.7.data.obs" / "c" / "0" / "0").write_bytes(b"x")
    (root / "versions" / "zarr.0123456789abcdef0123456789abcdef.partial").write_text("{")
    (root / "zarr.fedcba9876543210fedcba9876543210.partial").write_text("{")
    (root / "notes.partial").write_text("mine")  # not partial files of zarr's
    (root / "zarr.mine.partial").write_text("mine")
    (root / "videos").mkdir()  # not a zarr node, and not the store's: stays
    rb, msgs = _reopen(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (zarr warns of a member that is no node)
        assert rb.store.list_arrays("versions") == ["_temp_ver.0.data.action", "_temp_ver.0.data.obs",
                                                    "_temp_ver.0.meta.episode_ends"]
    assert sorted(rb.recovery.deleted) == ["(root)/zarr.fedcba9876543210fedcba9876543210.partial (debris)",
                                          "versions/_temp_ver.7.data.obs (debris)",
                                          "versions/zarr.0123456789abcdef0123456789abcdef.partial (debris)"]
    assert (root / "notes.partial").exists() and (root / "zarr.mine.partial").exists() and (root / "videos").is_dir()
    assert_buffer_equal(rb, eps[1:])
    with ReplayBuffer(str(root), version=0) as old:
        assert_buffer_equal(old, eps)
    rb.close()


def test_an_open_of_a_store_a_killed_swap_left_missing_names_where_it_went(tmp_path):
    """A ``copy --overwrite`` (any :func:`~replaybuf_core.store.replace.build_beside`) killed between the
    swap's two renames leaves no store at the path: the old one complete under ``.<name>.replaced-<pid>-*``,
    the new one under ``.<name>.building-<pid>-*`` (as ``replace.py`` documents).  An open of the path
    says so and names both (it said only that there was no store); nothing is renamed or deleted."""
    import shutil
    import subprocess
    import sys

    path = tmp_path / "s.zarr"
    rb, eps = _buffer(path)
    rb.close()
    pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                             text=True, check=True).stdout)  # a process that is gone
    aside, build = tmp_path / f".s.zarr.replaced-{pid}-0123abcd", tmp_path / f".s.zarr.building-{pid}-89abcdef"
    path.rename(aside)
    shutil.copytree(aside, build)
    for read_only in (True, False):
        with pytest.raises(FileNotFoundError, match="killed between its two renames") as err:
            ReplayBuffer(str(path), read_only=read_only)
        assert str(aside) in str(err.value) and str(build) in str(err.value)
    assert aside.is_dir() and build.is_dir() and not path.exists()
    with pytest.raises(FileNotFoundError, match="no zarr store") as err:  # nothing of the kind beside it
        ReplayBuffer(str(tmp_path / "other.zarr"))
    assert "renames" not in str(err.value)
    aside.rename(path)  # what the message tells the user to do
    with ReplayBuffer(str(path), read_only=True) as again:
        assert_buffer_equal(again, eps)


def test_reserved_temp_names_are_not_keys(tmp_path):
    rb, _ = _buffer(tmp_path / "b.zarr")
    for key in ("_temp", "_temp.obs", "_temp_old.x", "_temp_old"):
        with pytest.raises(ValueError, match="reserved"):
            rb.add_episode({**make_episode(2), key: np.zeros(2)})


def test_recover_report_without_apply(tmp_path):
    rb, _ = _buffer(tmp_path / "b.zarr")
    _interrupt_append(rb, extra=2)
    rep = recover(rb.store, apply=False)
    assert not rep.applied and rep.extra_rows == {"action": 2, "obs": 2} and rep.n_steps == 11
    assert rb.store.shape("data", "obs")[0] == 13
    assert "hidden" in str(rep)


# ------------------------------------------------------------------------------------- verify --repair
def test_verify_repair_cli(tmp_path, capsys):
    from replaybuf_core.cli import main

    path = tmp_path / "b.zarr"
    rb, eps = _buffer(path)
    _interrupt_append(rb)
    _interrupt_commit(rb, k=1)
    rb.close()
    assert main(["verify", str(path)]) == 0  # both are notes, not errors
    out = capsys.readouterr().out
    assert "interrupted commit" in out and "interrupted append" in out
    assert main(["verify", "--repair", str(path)]) == 0
    out = capsys.readouterr().out
    assert "REPAIRED: meta/episode_ends has 1 trailing fill value(s)" in out
    assert "REPAIRED: data array 'obs' has 3 steps past" in out and "dropped" in out
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # clean now: no recovery warning
        again = ReplayBuffer(str(path))
    assert again.recovery.clean
    assert_buffer_equal(again, eps)
    again.close()
    assert main(["verify", "--repair", str(path)]) == 0
    assert "nothing to do" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ fault injection
#: (kind, max delay in s): long enough to land anywhere in a few calls of the operation
KILLS = [("add_episode", 0.3), ("writer", 0.4), ("writer_frames", 0.4), ("drop_episode", 0.3), ("pop_episode", 0.3),
         ("set_chunks", 0.6), ("set_compressors", 0.6), ("rechunk_recompress", 0.6), ("delete_episodes", 1.5),
         ("delete_frames", 1.5)]
N_KILLS = 5


@pytest.mark.parametrize("kind, max_delay", KILLS, ids=[k for k, _ in KILLS])
def test_sigkill(tmp_path, kind, max_delay):
    path = tmp_path / "crash.zarr"
    crash.create(path, n_episodes=crash.MIN_EPISODES, kind=kind)
    rng = np.random.default_rng(sum(map(ord, kind)))
    results = [crash.run_trial(kind, path, rng, max_delay=max_delay) for _ in range(N_KILLS)]
    bad = [r for r in results if not r.clean_open or r.lost]
    assert not bad, bad


#: metadata writes and deletions (:mod:`replaybuf_core.testing.file_op_kill`) of one call of each kind on the
#: trial stores, as measured (they only set the range the kill points are drawn from)
FILE_OPS_PER_CALL = {"add_episode": 6, "writer": 10, "writer_frames": 10, "drop_episode": 33, "pop_episode": 33,
                     "set_chunks": 393, "set_compressors": 346, "rechunk_recompress": 300, "delete_episodes": 33,
                     "delete_frames": 317}


@pytest.mark.parametrize("kind", crash.KINDS)
def test_sigkill_right_after_a_metadata_write_or_deletion(tmp_path, kind):
    """The child kills itself right after its N-th metadata write or deletion, N drawn from the first
    two calls' worth: the kills land between two steps of a commit, which kills at random instants
    rarely hit (an edit's commit once wrote its journal and its version log in two writes)."""
    path = tmp_path / "crash.zarr"
    crash.create(path, n_episodes=crash.MIN_EPISODES, kind=kind)
    rng = np.random.default_rng(7 + sum(map(ord, kind)))
    points = rng.integers(1, 2 * FILE_OPS_PER_CALL[kind] + 1, size=N_KILLS)
    results = [crash.run_trial(kind, path, rng, after_file_ops=int(n)) for n in points]
    bad = [(int(n), r) for n, r in zip(points, results) if not r.clean_open or r.lost]
    assert not bad, bad


def test_per_episode_meta_grows_with_the_commits_and_rows_staged_past_them_are_trimmed(tmp_path):
    """Meta rows staged for episodes to come (an import's) are written by the commit of their episode,
    before its ends; a kill between the two leaves rows past the commit, which a writable open drops
    (saying so) and a read-only open reports — never an episode's label for an episode not there."""
    path = str(tmp_path / "m.zarr")
    rb = ReplayBuffer.create_empty("zarr", path)
    rb.store.create_array("meta", "label", shape=(0,), dtype=np.int64, chunks=(16,), codec=None)
    labels = np.array([10, 11, 12, 13], np.int64)
    rb._stage_episode_meta({"label": labels})
    for i in range(2):
        rb.add_episode({"obs": np.full((3, 2), i, np.float32)})
        assert rb.store.read("meta", "label", 0, rb.store.shape("meta", "label")[0]).tolist() == labels[: i + 1].tolist()
    rb._write_staged_meta(2, 3)  # the third episode's commit, killed after its meta row
    rb.close()
    with pytest.warns(RuntimeWarning, match=r"meta/label has 1 row\(s\) past the 2 committed episodes.*left"):
        ro = ReplayBuffer.create_from_path(path)
    ro.close()
    with pytest.warns(RuntimeWarning, match=r"meta/label has 1 row\(s\) past the 2 committed episodes.*dropped"):
        rw = ReplayBuffer(path)
    with rw:
        assert rw.store.shape("meta", "label") == (2,)
        rw.delete_episodes([0])
        assert rw.store.read("meta", "label", 0, 1).tolist() == [11]
    with pytest.raises(ValueError, match="one row per committed episode"):
        with ReplayBuffer(path) as again:
            again._stage_episode_meta({"obs_missing": labels})
