"""Versions of a store (:mod:`replaybuf_core.store.versions`): every append session, edit and restore is
a version; any version reads back exactly, restores exactly, and ``gc`` frees old ones without taking
what a reader holds.

Expected contents come from a simple model — the list of each version's episodes, kept in NumPy as
they were appended and edited — never from the store; pixels are read through zarr-python.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.store import versions
from replaybuf_core.store.versions import VersionNotFoundError

pytest.importorskip("imagecodecs")

SIDE = 8


def _episode(i: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {"img": rng.integers(0, 255, (n, SIDE, SIDE, 3), dtype=np.uint8),
            "x": (np.arange(n, dtype=np.float32) + 1000 * i)[:, None] * np.ones((1, 2), np.float32)}


def _content(path, version=None) -> list[dict[str, np.ndarray]]:
    """The episodes of the store (a version of it) as the buffer reads them."""
    with ReplayBuffer(str(path), version=version) if version is not None else ReplayBuffer(str(path), read_only=True) as rb:
        ends = np.asarray(rb.episode_ends)
        data = {k: np.asarray(rb[k][:]) for k in rb.keys()}
    return [{k: v[a:b] for k, v in data.items()} for a, b in zip(np.r_[0, ends[:-1]], ends)]


def _same(got: list[dict], want: list[dict]) -> None:
    assert [len(e["x"]) for e in got] == [len(e["x"]) for e in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g["x"], w["x"])
        np.testing.assert_array_equal(g["img"], w["img"])


def _build(path, n=4, frames="img=exact"):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    with rb.writer(frames=frames) as w:
        for i in range(n):
            w.add_episode(_episode(i, 5 + i))
    rb.close()
    return [_episode(i, 5 + i) for i in range(n)]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_version_reads_and_restores_as_the_model_says(tmp_path_factory, data):
    """Model: ``states[id]`` = the episodes of version ``id``.  Random appends, deletes, trims and
    restores; then every version in the log reads as its model state, and the current one is the last."""
    path = tmp_path_factory.mktemp("v") / "s.zarr"
    frames = data.draw(st.sampled_from(["img=exact", "img=fast", "img=video:g4"]))
    _build(path, 3, frames)
    states = {0: _content(path)}  # as stored (JPEG and video frames are what the codec made of them)
    cur = list(states[0])
    with ReplayBuffer(str(path)) as rb:
        assert rb.version["id"] == 0 and rb.version["n_episodes"] == 3
        for step in range(data.draw(st.integers(1, 4))):
            op = data.draw(st.sampled_from(["append", "drop", "delete", "trim", "restore"]))
            if op == "append" or len(cur) < 2:
                rb.add_episode(_episode(100 + step, data.draw(st.integers(1, 9))))
                rb.close()  # an append session ends: a version
                cur.append(_content(path)[-1])  # as stored
                rb = ReplayBuffer(str(path))
            elif op == "drop":
                rb.drop_episode()  # on a store with versions: an edit
                cur.pop()
            elif op == "delete":
                i = data.draw(st.integers(0, len(cur) - 1))
                rb.delete_episodes([i])
                del cur[i]
            elif op == "trim":
                i = data.draw(st.integers(0, len(cur) - 1))
                a = data.draw(st.integers(0, len(cur[i]["x"]) - 1))
                rb.trim_episode(i, a)
                cur[i] = {k: v[a:] for k, v in cur[i].items()}
            else:
                vid = data.draw(st.sampled_from(sorted(states)))
                rb.restore(vid)
                cur = list(states[vid])
            if rb.version["id"] not in states:
                states[rb.version["id"]] = list(cur)
        rb.close()
    log = versions.log(ReplayBuffer(str(path), read_only=True).store)
    assert [v["id"] for v in log] == sorted(states)
    for vid, want in states.items():
        _same(_content(path, vid), want)
    _same(_content(path), cur)
    # plain zarr-python reads the current version in today's layout, with nothing else in data/
    g = zarr.open_group(str(path), mode="r")
    assert sorted(g["data"].array_keys()) == ["img", "x"]
    np.testing.assert_array_equal(g["meta/episode_ends"][:], np.cumsum([len(e["x"]) for e in cur]))
    np.testing.assert_array_equal(g["data/x"][:], np.concatenate([e["x"] for e in cur]))


def test_versions_are_named_by_tags_and_unknown_ones_are_refused_by_name(tmp_path):
    path = tmp_path / "s.zarr"
    eps = _build(path, 4)
    with ReplayBuffer(str(path)) as rb:
        versions.tag(rb.store, "raw")
        rb.delete_episodes([0, 2], message="drop the bad ones")
        assert rb.version["message"] == "drop the bad ones" and rb.version["kind"] == "delete_episodes"
    _same(_content(path, "raw"), eps)
    _same(_content(path, -1), [eps[1], eps[3]])
    with pytest.raises(VersionNotFoundError, match=r"no version 'nope': it has versions 0..1 and tags \['raw'\]"):
        ReplayBuffer(str(path), version="nope")
    with ReplayBuffer(str(path)) as rb:
        with pytest.raises(VersionNotFoundError, match="no version 7"):
            rb.restore(7)
        with pytest.raises(ValueError, match="not a number"):
            versions.tag(rb.store, "12")
    with ReplayBuffer(str(path), version="raw") as old:
        assert old.read_only and old.n_episodes == 4
        from replaybuf_core.errors import ReadOnlyError
        with pytest.raises(ReadOnlyError, match=r"reads version 0 \(opened with version=\).*restore"):
            old.add_episode(_episode(9, 3))
        with pytest.raises(ReadOnlyError, match="reads version 0"):
            old.delete_episodes([0])


def test_a_buffers_version_is_the_documented_record_without_the_stores_bookkeeping(tmp_path):
    """``rb.version`` gives id, time, kind, message, command, n_episodes and n_steps (README) — the
    log's record as stored, less its ``undo`` (where the older rows are kept)."""
    path = tmp_path / "s.zarr"
    _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1], message="one fewer")
        newest = rb.version
    stored = zarr.open_group(str(path), mode="r")["meta"].attrs["replaybuf_versions"]
    assert "undo" in stored[0]  # the edit kept the old rows: the raw record says where
    fields = {"id", "time", "kind", "message", "command", "n_episodes", "n_steps"}
    assert newest == {k: stored[1][k] for k in fields} and newest["message"] == "one fewer"
    with ReplayBuffer(str(path), version=0) as old:
        assert old.version == {k: stored[0][k] for k in fields}
        assert old.version["n_episodes"] == 3 and old.n_episodes == 3


def test_a_store_made_by_synth_or_copy_starts_with_its_first_version(tmp_path):
    """``replaybuf log`` on a new store names what made it: version 0, its episodes and the command
    (it said "no versions recorded", and the first tag or edit recorded version 0 under its own
    command)."""
    src, dst = tmp_path / "s.zarr", tmp_path / "c.zarr"
    cli = [sys.executable, "-m", "replaybuf_core.cli"]
    subprocess.run(cli + ["synth", "circle", str(src), "--episodes", "3"], check=True, capture_output=True,
                   timeout=300)
    subprocess.run(cli + ["copy", str(src), str(dst), "--no-progress"], check=True, capture_output=True,
                   timeout=300)
    for path, command, kind in ((src, f"replaybuf synth circle {src} --episodes 3", "append"),  # it appends
                                (dst, f"replaybuf copy {src} {dst} --no-progress", "copy")):
        meta = zarr.open_group(str(path), mode="r")["meta"]
        ends = np.asarray(meta["episode_ends"][:])
        (rec,) = meta.attrs["replaybuf_versions"]
        assert (rec["id"], rec["kind"], rec["command"]) == (0, kind, command)
        assert (rec["n_episodes"], rec["n_steps"]) == (3, int(ends[-1])) and ends.size == 3
    out = subprocess.run(cli + ["log", str(dst)], check=True, capture_output=True, text=True, timeout=300).stdout
    assert out.split()[0] == "0" and f"$ replaybuf copy {src} {dst}" in out


def test_a_sampler_reads_the_version_it_was_given(tmp_path):
    from replaybuf_core import SequenceSampler

    path = tmp_path / "s.zarr"
    eps = _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([0])
    with ReplayBuffer(str(path), version=0) as old:
        s = SequenceSampler(old, sequence_length=2, keys=["x"])
        first = s.sample_sequence(0)["x"]
    np.testing.assert_array_equal(first, eps[0]["x"][:2])  # episode 0 of version 0: deleted since


def test_gc_drops_old_versions_but_not_what_a_reader_holds(tmp_path):
    path = tmp_path / "s.zarr"
    eps = _build(path, 4)
    with ReplayBuffer(str(path)) as rb:
        for i in range(3):
            rb.delete_episodes([0])
    held = ReplayBuffer(str(path), version=1)  # a training run reading version 1
    with ReplayBuffer(str(path)) as rb:
        rep = versions.gc(rb.store, keep=1, store_dir=path)
    assert rep.dropped == [0] and 1 in rep.held  # 1 is held: it and every newer version stay
    _same(_content(held.store and path, 1), eps[1:])
    _same([{k: np.asarray(held[k][:])[a:b] for k in ("x", "img")}
           for a, b in zip(np.r_[0, held.episode_ends[:-1]], held.episode_ends)], eps[1:])
    held.close()
    with ReplayBuffer(str(path)) as rb:
        rep = versions.gc(rb.store, keep=1, store_dir=path)
    assert rep.dropped == [1, 2] and rep.kept == [3]
    assert list(zarr.open_group(str(path), mode="r")["versions"].array_keys()) == []  # nothing left to undo
    with pytest.raises(VersionNotFoundError, match="it has versions 3..3"):
        ReplayBuffer(str(path), version=1)
    _same(_content(path), eps[3:])
    with pytest.raises(ValueError, match="exactly one"):
        versions.gc(ReplayBuffer(str(path), read_only=True).store)


def test_gc_keeps_a_tagged_version_and_every_newer_one_until_the_tag_is_removed(tmp_path):
    """A tag pins a version (what a training run read): ``gc`` keeps it and every newer version
    (whose undos it is read through) and says which tag kept them; once the tag is removed, ``gc``
    drops them.  A tag moved to a newer version no longer pins the older one."""
    path = tmp_path / "s.zarr"
    eps = _build(path, 5)
    with ReplayBuffer(str(path)) as rb:
        for _ in range(4):
            rb.delete_episodes([0])  # versions 1..4
        versions.tag(rb.store, "a", 1)
        versions.tag(rb.store, "b", 2)
        rep = versions.gc(rb.store, keep=1, store_dir=path)
        assert (rep.dropped, rep.kept, rep.tagged) == ([0], [1, 2, 3, 4], {1: ["a"], 2: ["b"]})
        assert any("version 1 is tagged 'a'" in line for line in rep.lines())
        versions.tag(rb.store, "a", 3)  # moved: version 1 is pinned no more
        rep = versions.gc(rb.store, keep=1, store_dir=path)
        assert (rep.dropped, rep.kept, rep.tagged) == ([1], [2, 3, 4], {2: ["b"], 3: ["a"]})
        with pytest.raises(VersionNotFoundError, match=r"no tag 'c'; the tags are \['a', 'b'\]"):
            versions.untag(rb.store, "c")
        assert versions.untag(rb.store, "b") == 2 and versions.tags(rb.store) == {"a": 3}
        rep = versions.gc(rb.store, older_than=datetime.timedelta(seconds=-60), store_dir=path)
        assert (rep.dropped, rep.kept, rep.tagged) == ([2], [3, 4], {3: ["a"]})
    _same(_content(path, "a"), eps[3:])
    _same(_content(path), eps[4:])


def test_gc_older_than_keeps_the_current_version(tmp_path):
    path = tmp_path / "s.zarr"
    eps = _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1])
        rep = versions.gc(rb.store, older_than=datetime.timedelta(seconds=-60), store_dir=path)  # all "old"
    assert rep.kept == [1]
    _same(_content(path), [eps[0], eps[2]])


def test_a_dead_readers_hold_does_not_block_gc(tmp_path):
    path = tmp_path / "s.zarr"
    _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1])
    code = textwrap.dedent(f"""
        import os, signal
        from replaybuf_core import ReplayBuffer
        rb = ReplayBuffer({str(path)!r}, version=0)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", code], timeout=60, env={**os.environ})
    assert p.returncode == -signal.SIGKILL
    assert len(os.listdir(path / ".replaybuf.readers")) == 1  # its hold file is left ...
    with ReplayBuffer(str(path)) as rb:
        rep = versions.gc(rb.store, keep=1, store_dir=path)
    assert rep.dropped == [0] and not rep.held  # ... but holds nothing: its lock died with it
    assert os.listdir(path / ".replaybuf.readers") == []


def test_the_cli_logs_tags_diffs_restores_and_collects(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    eps = _build(path, 4)
    assert main(["tag", str(path), "before-cleanup"]) == 0
    assert main(["edit", "delete", str(path), "1", "3", "--no-progress"]) == 0
    assert main(["edit", "trim", str(path), "--episode", "0", "--start", "2", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["log", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["2", out[0].split()[1], "trim_episode"]
    assert "[before-cleanup]" in out[4] and out[5].strip().startswith("$ ")
    assert main(["diff", str(path), "before-cleanup"]) == 0
    out = capsys.readouterr().out
    assert "removed 2 episode(s): 1, 3" in out and "changed 1 episode(s): 0->0" in out and "added 0" in out
    assert main(["restore", str(path), "before-cleanup", "--no-progress"]) == 0
    assert "-> 4 episodes" in capsys.readouterr().out
    _same(_content(path), eps)
    assert main(["gc", str(path), "--keep", "1"]) == 0  # the tag pins version 0, and so every newer one
    out = capsys.readouterr().out
    assert "dropped 0 version(s), kept 4 (0..3)" in out and "version 0 is tagged 'before-cleanup'" in out
    _same(_content(path, "before-cleanup"), eps)
    assert main(["tag", str(path), "before-cleanup", "--delete"]) == 0
    assert "tag 'before-cleanup' removed (it named version 0" in capsys.readouterr().out
    assert main(["tag", str(path), "before-cleanup", "--delete"]) == 2
    assert "no tag 'before-cleanup'; the store has no tags" in capsys.readouterr().err
    assert main(["gc", str(path), "--keep", "1"]) == 0
    assert "dropped 3 version(s) (0..2), kept 1 (3..3)" in capsys.readouterr().out
    assert main(["restore", str(path), "0"]) == 2
    assert "no version 0: it has versions 3..3" in capsys.readouterr().err


_KILL_CHILD = textwrap.dedent("""
    import sys, time
    from replaybuf_core import ReplayBuffer
    from replaybuf_core.store import versions
    path, op = sys.argv[1], sys.argv[2]
    with ReplayBuffer(path) as rb:
        print("ready", flush=True)
        if op == "delete":
            rb.delete_episodes([0])
        elif op == "restore":
            rb.restore(0)
        else:
            versions.gc(rb.store, keep=1, store_dir=None if "://" in path else path)
    print("done", flush=True)
""")


@pytest.mark.slow  # about 30 SIGKILLs
@pytest.mark.parametrize("op", ["delete", "restore", "gc"])
def test_a_sigkill_at_any_instant_of_edit_restore_or_gc_loses_no_committed_version(tmp_path, op):
    """A store with versions 0 (4 episodes) and 1 (episode 0 deleted), JPEG frames; a child runs the
    op and is killed at a random instant.  The next writable open finds the store at the version
    before the op or after it, and every version its log lists reads as the model says."""
    base = tmp_path / "base.zarr"
    _build(base, 4, "img=fast")
    eps = _content(base)
    with ReplayBuffer(str(base)) as rb:
        rb.delete_episodes([0])
    states = {0: eps, 1: eps[1:]}
    after = {"delete": eps[2:], "restore": eps, "gc": eps[1:]}[op]
    rng = np.random.default_rng(0)
    durations = []
    for trial in range(10):
        path = tmp_path / f"t{trial}.zarr"
        shutil.copytree(base, path)
        child = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, str(path), op], stdout=subprocess.PIPE,
                                 text=True)
        assert child.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        if trial == 0:  # uncut: how long the op takes
            assert child.wait(timeout=120) == 0
            durations.append(time.perf_counter() - t0)
        else:
            time.sleep(rng.uniform(0, durations[0] * 1.2))
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
        _recovers_to_a_version(path, states, after)


def _recovers_to_a_version(path: Path, states: dict[int, list[dict]], after: list[dict]) -> None:
    """The next writable open of ``path`` (a store whose op was killed) finds it at the version before
    the op (``states[1]``) or after it (``after``), and every version its log lists reads as ``states``
    says (a new version, 2, is the op's result)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (what recovery rolled back)
        ReplayBuffer(str(path)).close()  # the writable open rolls back what the kill cut
    now = _content(path)
    before_op = len(now) == len(states[1]) and np.array_equal(now[0]["x"], states[1][0]["x"])
    _same(now, states[1] if before_op else after)
    with ReplayBuffer(str(path), read_only=True) as rb:
        log = versions.log(rb.store)
    for v in log:
        _same(_content(path, v["id"]), states.get(v["id"], after))
    assert not (path / "data" / "_temp_undo.img").exists()


#: the op of _KILL_CHILD, killed (SIGKILL, by itself) right after its N-th metadata write or deletion
#: (:mod:`replaybuf_core.testing.file_op_kill`; argv[3]; 0: never, and it prints how many it made)
_KILL_AT_WRITE_CHILD = textwrap.dedent("""
    import sys
    from replaybuf_core.testing.file_op_kill import FileOpKiller
    killer = FileOpKiller(int(sys.argv[3]) or 2**62)
    sys.argv = sys.argv[:3]
    exec(sys.stdin.read().replace('print("ready", flush=True)', 'print("ready", flush=True); killer.start()').replace(
        'print("done", flush=True)', 'print("done", killer.count, flush=True)'))
""")


@pytest.mark.slow  # about 40 SIGKILLs
@pytest.mark.parametrize("op", ["delete", "restore", "gc"])
def test_a_sigkill_after_each_metadata_write_or_deletion_of_edit_restore_or_gc_loses_no_committed_version(tmp_path, op):
    """As the random-instant trial above, but killed right after each ``zarr.json`` write or deletion of
    the op in turn (every step of its journal, commit and version log is one): a commit that wrote
    its attributes one at a time left an edited store whose log lost the edit and the undo of the
    version before it (that version then read wrong rows)."""
    base = tmp_path / "base.zarr"
    _build(base, 4, "img=fast")
    eps = _content(base)
    with ReplayBuffer(str(base)) as rb:
        rb.delete_episodes([0])
    states, after = {0: eps, 1: eps[1:]}, {"delete": eps[2:], "restore": eps, "gc": eps[1:]}[op]

    def run(path: Path, n_kill: int) -> subprocess.CompletedProcess:
        shutil.copytree(base, path)
        return subprocess.run([sys.executable, "-c", _KILL_AT_WRITE_CHILD, str(path), op, str(n_kill)],
                              input=_KILL_CHILD, capture_output=True, text=True, timeout=120)

    uncut = run(tmp_path / "uncut.zarr", 0)
    assert uncut.returncode == 0, uncut.stderr
    n_writes = int(uncut.stdout.split()[-1])
    assert n_writes >= {"gc": 2}.get(op, 3)  # (a journal, a commit, a log; gc: a log, a deletion)
    for n_kill in range(1, n_writes + 1):
        path = tmp_path / f"k{n_kill}.zarr"
        assert run(path, n_kill).returncode == -signal.SIGKILL
        _recovers_to_a_version(path, states, after)


@pytest.mark.parametrize("frames", ["img=fast", "img=video:g4"])
def test_undos_hard_linked_to_the_array_stay_as_they_were_through_later_writes(tmp_path, frames):
    """On local disk an edit's backup and a restore's rows are whole stored objects hard-linked, not
    copied (the same file under two names).  Every later write — the rewrite of the tail, appends,
    writes through zarr-python itself — stores a new file and renames it over the old name, so no
    version changes: the model's versions read back after all of them."""
    path = tmp_path / "s.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    with rb.writer(frames=frames) as w:  # (small frames: shards of 256 rows; the edit links the first two)
        for i in range(6):
            w.add_episode(_episode(i, 100))
    rb.close()
    states = {0: _content(path)}
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1])
        rb.restore(0)
    states[1], states[2] = states[0][:1] + states[0][2:], states[0]
    linked = [f for f in (path / "data" / "img").rglob("*") if f.is_file() and f.stat().st_nlink > 1]
    assert linked  # the restored rows are the undo's files, linked (shard 1: rows 256..511)
    arr = zarr.open_array(str(path / "data" / "img"), mode="r+")  # zarr-python writes into a linked object
    arr[300:301] = np.zeros((1, SIDE, SIDE, 3), np.uint8)  # (the current version: version 2 changes)
    now = zarr.open_array(str(path / "data" / "img"), mode="r")[:]
    states[2] = [dict(e, img=now[a:a + len(e["x"])]) for e, a in zip(states[0], range(0, 600, 100))]
    with ReplayBuffer(str(path)) as rb:
        rb.add_episode(_episode(9, 5))
    for vid in (0, 1, 2):
        _same(_content(path, vid), states[vid])


def test_a_copy_carries_the_current_version_only(tmp_path, capsys):
    path, dst = tmp_path / "s.zarr", tmp_path / "c.zarr"
    eps = _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([0])
    assert main(["copy", str(path), str(dst)]) == 0
    _same(_content(dst), eps[1:])
    _same(_content(dst, 0), eps[1:])  # the copy's one version: what it holds
    with pytest.raises(VersionNotFoundError, match="no version 1: it has versions 0..0"):
        ReplayBuffer(str(dst), version=1)  # (the older versions stayed with the undos, in the source)
    _same(_content(path, 0), eps)


@pytest.mark.slow  # a pass-through import of 3 real G1 episodes (~7 s)
def test_real_g1_frames_stay_bit_for_bit_through_delete_trim_and_restore(tmp_path):
    """The G1 sample's AV1 camera imported as pass-through packets (chunks of 32 frames, GOPs of 2):
    deleting episode 0 shifts every later frame off the chunk grid, trimming 5 frames off the next
    starts mid-GOP; every kept frame reads back as zarr-python read it before, and the restore gives
    back every byte's worth of pixels."""
    from shared_data import SHARED_DATA

    src = SHARED_DATA / "lerobot_v21_g1_20ep"
    if not src.is_dir():
        pytest.skip(f"G1 sample not found at {src}")
    pytest.importorskip("av")
    path = tmp_path / "g1.zarr"
    assert main(["import", "lerobot", str(src), str(path), "--video", "passthrough", "--episodes", "0:3",
                 "--no-progress"]) == 0
    key = "observation.images.cam_high"
    g = zarr.open_group(str(path), mode="r")
    before, ends = g[f"data/{key}"][:], g["meta/episode_ends"][:]
    with ReplayBuffer(str(path)) as rb:
        assert rb.delete_episodes([0]).frames_reencoded == 0
        report = rb.trim_episode(0, 5, 100)
        assert report.frames_reencoded == 0 and report.reencoded[key].moved > 0
    want = np.concatenate([before[ends[0]:ends[1]][5:100], before[ends[1]:]])
    np.testing.assert_array_equal(zarr.open_group(str(path), mode="r")[f"data/{key}"][:], want)
    with ReplayBuffer(str(path)) as rb:
        rb.restore(0)
    np.testing.assert_array_equal(zarr.open_group(str(path), mode="r")[f"data/{key}"][:], before)


def test_versions_on_object_storage(s3_server):
    """On s3:// (the session's moto server): an edit keeps its undo in the store's versions group, an
    older version reads back, a restore gives the episodes back, gc frees the undo."""
    pytest.importorskip("obstore")
    url = s3_server.new_url()
    rng = np.random.default_rng(3)
    eps = [{"obs": rng.standard_normal((4 + i, 3)).astype(np.float32),
            "img": rng.integers(0, 256, (4 + i, 8, 8, 3), dtype=np.uint8)} for i in range(3)]
    with ReplayBuffer.create_empty("zarr", url) as rb:
        for ep in eps:
            rb.add_episode(ep)
    with ReplayBuffer(url) as rb:
        rb.delete_episodes([0], message="on s3")
        assert rb.n_episodes == 2
    with ReplayBuffer(url, version=0) as old:
        assert old.n_episodes == 3
        for i, ep in enumerate(eps):
            np.testing.assert_array_equal(old.get_episode(i)["img"], ep["img"])
    with ReplayBuffer(url) as rb:
        rb.restore(0)
        for i, ep in enumerate(eps):
            np.testing.assert_array_equal(rb.get_episode(i)["obs"], ep["obs"])
        rep = versions.gc(rb.store, keep=1)
    assert rep.dropped == [0, 1] and rep.arrays


@pytest.mark.slow  # SIGKILLs against the moto server
@pytest.mark.parametrize("op", ["delete", "restore", "gc"])
def test_a_sigkill_mid_edit_restore_or_gc_on_object_storage_loses_no_committed_version(s3_server, op):
    pytest.importorskip("obstore")
    rng = np.random.default_rng(4)
    eps = [{"x": (np.arange(5 + i, dtype=np.float32) + 100 * i)[:, None] * np.ones((1, 2), np.float32),
            "img": rng.integers(0, 256, (5 + i, 8, 8, 3), dtype=np.uint8)} for i in range(4)]
    states = {0: eps, 1: eps[1:]}
    after = {"delete": eps[2:], "restore": eps, "gc": eps[1:]}[op]
    durations = []
    for trial in range(6):
        url = s3_server.new_url()
        with ReplayBuffer.create_empty("zarr", url) as rb:
            for ep in eps:
                rb.add_episode(ep)
        with ReplayBuffer(url) as rb:
            rb.delete_episodes([0])
        child = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, url, op], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        if trial == 0:
            assert child.wait(timeout=120) == 0
            durations.append(time.perf_counter() - t0)
        else:
            time.sleep(np.random.default_rng(trial).uniform(0, durations[0]))
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
            main(["unlock", url])  # the killed writer's lease (its process is gone)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ReplayBuffer(url).close()  # rolls back what the kill cut
        now = _content(url)
        before_op = len(now) == len(states[1]) and np.array_equal(now[0]["x"], states[1][0]["x"])
        _same(now, states[1] if before_op else after)
        with ReplayBuffer(url, read_only=True) as rb:
            log = versions.log(rb.store)
        for v in log:
            _same(_content(url, v["id"]), states.get(v["id"], after))


def test_a_torch_dataset_reads_a_version_pinned_to_its_id(tmp_path):
    torch = pytest.importorskip("torch")
    from replaybuf_core.torch import SequenceDataset

    path = tmp_path / "s.zarr"
    eps = _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        versions.tag(rb.store, "train")
        rb.delete_episodes([0])
    ds = SequenceDataset(str(path), 2, version="train", keys=["x"])
    assert ds.version["id"] == 0 and ds.version["n_episodes"] == 3
    with ReplayBuffer(str(path)) as rb:
        versions.tag(rb.store, "train", -1)  # the tag moves: the dataset keeps reading what it named
    np.testing.assert_array_equal(ds[0]["x"].numpy(), eps[0]["x"][:2])
    assert isinstance(ds[0]["x"], torch.Tensor)
    assert SequenceDataset(str(path), 2, keys=["x"]).version is None
    with pytest.raises(VersionNotFoundError):
        SequenceDataset(str(path), 2, version="nope")


def test_episodes_appended_after_an_edit_in_the_same_session_are_a_version(tmp_path):
    """Hypothesis found it (CI): delete episode 0 of 3, then append one episode of the deleted one's
    length in the same session: the counts were those at open again, so the append was not recorded
    and version 1 read three episodes (the last empty)."""
    path = tmp_path / "s.zarr"
    eps = _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([0])
        rb.add_episode(_episode(50, len(eps[0]["x"])))
    with ReplayBuffer(str(path), read_only=True) as rb:
        log = versions.log(rb.store)
    assert [(v["id"], v["n_episodes"]) for v in log] == [(0, 3), (1, 2), (2, 3)]
    _same(_content(path, 1), eps[1:])
    _same(_content(path, 2), eps[1:] + [_episode(50, len(eps[0]["x"]))])


def test_the_last_version_reads_as_recorded_when_later_appends_were_not(tmp_path):
    """A recording killed before its close committed episodes no version records yet: the last
    version still reads as it was recorded, not with the new episodes' meta rows (empty episodes)."""
    path = tmp_path / "s.zarr"
    eps = _build(path, 3)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1])
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_versions import _episode
        from replaybuf_core import ReplayBuffer
        rb = ReplayBuffer({str(path)!r})
        rb.add_episode(_episode(60, 4))
        os._exit(0)  # killed before close: the append is committed, its version not recorded
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    with ReplayBuffer(str(path), read_only=True) as rb:
        assert rb.n_episodes == 3 and [v["n_episodes"] for v in versions.log(rb.store)] == [3, 2]
    _same(_content(path, 1), [eps[0], eps[2]])
    _same(_content(path), [eps[0], eps[2], _episode(60, 4)])


def test_a_merge_is_one_version_and_a_copy_over_a_store_with_versions_starts_a_new_log(tmp_path, capsys):
    """A merge records one version (the first source's copy was recorded as a version of its own
    too: a state nobody made).  A copy that replaces a store with versions in place (a store
    object) leaves no version of the old log reading the new arrays: the old log, tags and undos go
    and the copy is version 0 — appended to the old log, version 1 read the copy's rows."""
    from zarr.storage import LocalStore

    a, b, m = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "m.zarr"
    eps_a, eps_b = _build(a, 3), [_episode(10 + i, 4) for i in range(4)]
    with ReplayBuffer.create_empty("zarr", str(b)) as rb:
        for e in eps_b:
            rb.add_episode(e)
    assert main(["merge", str(a), str(b), str(m), "--no-progress"]) == 0
    (rec,) = zarr.open_group(str(m), mode="r")["meta"].attrs["replaybuf_versions"]
    assert (rec["id"], rec["n_episodes"], rec["kind"]) == (0, 7, "merge")
    with ReplayBuffer(str(a)) as rb:
        versions.tag(rb.store, "mine")
        rb.delete_episodes([0])
    assert any(n.startswith("_temp_ver.") for n in zarr.open_group(str(a), mode="r")["versions"].array_keys())
    ReplayBuffer.copy_from_store(str(b), store=LocalStore(str(a)), if_exists="replace").close()
    meta = zarr.open_group(str(a), mode="r")["meta"]
    (rec,) = meta.attrs["replaybuf_versions"]
    assert (rec["id"], rec["n_episodes"], rec["kind"], meta.attrs["replaybuf_tags"]) == (0, 4, "copy", {})
    assert not list(zarr.open_group(str(a), mode="r")["versions"].array_keys())
    _same(_content(a, 0), eps_b)
    with pytest.raises(VersionNotFoundError):
        ReplayBuffer(str(a), version="mine")
