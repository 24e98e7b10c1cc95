"""In-place edits: delete_episodes, trim_episode, keep_episodes.

Checked against a plain list-of-episodes model (hypothesis), with per-episode meta rows following;
refused edits change nothing; an edit interrupted in its own process (Ctrl-C at any store write) is
rolled back there — the store exactly as before, nothing left that a read-only open refuses — or,
past its commit, finished; when that rollback fails, the journal stays for the next writable open and
a read-only one refuses; deleting the last episode rewrites only the tail.
(SIGKILL trials of delete_episodes: tests/test_crash_safety.py.)
"""

from __future__ import annotations

import os
import shutil
import signal
import warnings

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.store import editing
from replaybuf_core.store.editing import EDIT_JOURNAL, UNDO_PREFIX, InterruptedEditError


def _episode(i: int, n: int) -> dict:
    j = np.arange(n)
    return {"x": (1000 * i + j).astype(np.int64), "v": np.stack([j * 0.5 + i, -j + 0.25], 1).astype(np.float32),
            "img": np.full((n, 4, 5, 3), i % 256, np.uint8) + (j % 7)[:, None, None, None].astype(np.uint8),
            "s": np.array([f"e{i}s{k}" for k in j], dtype=object)}


def _build(lengths, backend, tmp_path):
    buf = ReplayBuffer.create_empty_numpy() if backend == "numpy" else ReplayBuffer.create_empty(
        "zarr", str(tmp_path / "e.zarr"))
    chunks = {"x": (4,), "v": (4, 2), "img": (3, 4, 5, 3), "s": (4,)}
    for i, n in enumerate(lengths):
        buf.add_episode(_episode(i, n), chunks=chunks if backend == "zarr" else None)
    buf.update_meta({"tag": np.arange(len(lengths), dtype=np.int64) * 10})
    return buf


def _check(buf, model):
    """``model``: list of (episode dict, tag) in order."""
    assert buf.n_episodes == len(model)
    ends = np.cumsum([len(e["x"]) for e, _ in model]).astype(np.int64)
    np.testing.assert_array_equal(buf.episode_ends, ends)
    for i, (e, tag) in enumerate(model):
        got = buf.get_episode(i)
        for k in e:
            assert got[k].tolist() == e[k].tolist(), (i, k)
    assert np.asarray(buf.meta["tag"][:]).tolist() == [t for _, t in model]
    assert buf.store.get_attrs("meta").get(EDIT_JOURNAL) is None
    assert not [n for g in ("data", "meta") for n in buf.store.list_arrays(g) if n.startswith(UNDO_PREFIX)]


edit_st = st.one_of(
    st.tuples(st.just("delete"), st.lists(st.integers(0, 30), max_size=4, unique=True)),
    st.tuples(st.just("trim"), st.integers(0, 30), st.integers(0, 8), st.integers(1, 9)),
    st.tuples(st.just("keep"), st.lists(st.booleans(), min_size=0, max_size=12)),
)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=7), edits=st.lists(edit_st, max_size=4),
       backend=st.sampled_from(["numpy", "zarr"]))
def test_edits_match_a_list_model(tmp_path_factory, lengths, edits, backend):
    tmp = tmp_path_factory.mktemp("edit")
    buf = _build(lengths, backend, tmp)
    model = [(_episode(i, n), i * 10) for i, n in enumerate(lengths)]
    for edit in edits:
        n = len(model)
        if edit[0] == "delete":
            gone = [i for i in edit[1] if i < n]
            buf.delete_episodes(gone)
            model = [m for i, m in enumerate(model) if i not in gone]
        elif edit[0] == "trim":
            _, i, a, b = edit
            if i >= n:
                continue
            length = len(model[i][0]["x"])
            if not 0 <= a < b <= length:
                with pytest.raises(ValueError, match=f"episode {i} has {length} steps"):
                    buf.trim_episode(i, a, b)
                continue
            buf.trim_episode(i, a, b)
            e, tag = model[i]
            model[i] = ({k: v[a:b] for k, v in e.items()}, tag)
        else:
            mask = np.array((edit[1] + [True] * n)[:n], dtype=bool)
            buf.keep_episodes(mask)
            model = [m for m, keep in zip(model, mask) if keep]
        _check(buf, model)
    if backend == "zarr":
        buf.close()
        again = ReplayBuffer(str(tmp / "e.zarr"))
        assert again.recovery.clean
        _check(again, model)
        again.add_episode(_episode(99, 3))  # appending goes on after edits
        assert again.n_episodes == len(model) + 1
        assert again.get_episode(-1)["x"].tolist() == _episode(99, 3)["x"].tolist()
        again.close()


@pytest.mark.parametrize("call, error, match", [
    (lambda b: b.delete_episodes([5]), IndexError, "episode index 5 is out of range"),
    (lambda b: b.delete_episodes([1, 1]), ValueError, "listed more than once"),
    (lambda b: b.delete_episodes([0.5]), TypeError, "must be an int"),
    (lambda b: b.delete_episodes([[0]]), ValueError, "1-D"),
    (lambda b: b.trim_episode(0, 2, 2), ValueError, "0 <= start < stop <= length"),
    (lambda b: b.trim_episode(0, 0, 9), ValueError, "episode 0 has 4 steps"),
    (lambda b: b.trim_episode(7), IndexError, "out of range"),
    (lambda b: b.trim_episode(0, 1.0), TypeError, "start must be an int"),
    (lambda b: b.keep_episodes(np.ones(2, bool)), ValueError, "the buffer has 3 episodes"),
    (lambda b: b.keep_episodes([1, 0, 1]), TypeError, "must hold bool"),
    (lambda b: b.keep_episodes("nope"), KeyError, "no meta array 'nope'"),
])
def test_refused_edits_change_nothing(tmp_path, call, error, match):
    buf = _build([4, 2, 5], "zarr", tmp_path)
    model = [(_episode(i, n), i * 10) for i, n in enumerate([4, 2, 5])]
    with pytest.raises(error, match=match):
        call(buf)
    _check(buf, model)


def test_keep_episodes_by_meta_mask_and_read_only_refusal(tmp_path):
    buf = _build([3, 4, 5, 6], "zarr", tmp_path)
    buf.update_meta({"val": np.array([False, True, False, True])})
    buf.keep_episodes("val")
    _check(buf, [(_episode(1, 4), 10), (_episode(3, 6), 30)])
    assert buf.meta["val"][:].tolist() == [True, True]
    buf.close()
    ro = ReplayBuffer.create_from_path(tmp_path / "e.zarr")
    with pytest.raises(Exception, match="read-only"):
        ro.delete_episodes([0])


def _die_at_second_data_shrink(store, monkeypatch):
    """Make the rewrite's shrink of the second data key raise KeyboardInterrupt (journal written,
    rows of the first key already moved)."""
    real_resize = store.resize
    calls = []

    def dying_resize(group, name, n):
        calls.append(name)
        if group == "data" and len([c for c in calls if not c.startswith("_")]) == 2:
            raise KeyboardInterrupt("Ctrl-C")
        return real_resize(group, name, n)

    monkeypatch.setattr(store, "resize", dying_resize)


def _open_read_only_quietly(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recovery warning, nothing hidden
        ro = ReplayBuffer.create_from_path(path)
    assert ro.recovery.clean
    return ro


def test_an_interrupted_edit_is_rolled_back_at_once(tmp_path, monkeypatch):
    lengths = [4, 6, 3, 5]
    buf = _build(lengths, "zarr", tmp_path)
    model = [(_episode(i, n), i * 10) for i, n in enumerate(lengths)]
    _die_at_second_data_shrink(buf.store, monkeypatch)
    with pytest.raises(KeyboardInterrupt) as caught:
        buf.delete_episodes([1])
    monkeypatch.undo()
    _check(buf, model)  # the buffer itself: old episodes, no journal, no backups
    assert "the interrupted delete_episodes was rolled back" in "".join(caught.value.__notes__)
    ro = _open_read_only_quietly(tmp_path / "e.zarr")  # at once, while the writer is still open
    _check(ro, model)
    ro.close()
    buf.delete_episodes([1])  # and the edit can be done again
    _check(buf, [model[0]] + model[2:])


def test_a_failed_rollback_leaves_the_journal_for_the_next_writable_open(tmp_path, monkeypatch):
    lengths = [4, 6, 3, 5]
    buf = _build(lengths, "zarr", tmp_path)
    model = [(_episode(i, n), i * 10) for i, n in enumerate(lengths)]
    _die_at_second_data_shrink(buf.store, monkeypatch)

    def failing_rollback(store, apply):
        raise OSError("disk gone")

    monkeypatch.setattr(editing, "rollback", failing_rollback)
    with pytest.raises((InterruptedEditError, KeyboardInterrupt)) as caught:  # (a bare interrupt would stop pytest)
        buf.delete_episodes([1])
    monkeypatch.undo()
    assert caught.type is InterruptedEditError
    assert caught.match(r"delete_episodes was interrupted \(KeyboardInterrupt: Ctrl-C\) and undoing it .* failed "
                        r"\(OSError: disk gone\)")
    assert isinstance(caught.value.__cause__, OSError)
    assert isinstance(caught.value.__cause__.__context__, KeyboardInterrupt)  # the chain: interrupt, failure, error
    assert buf.store.get_attrs("meta").get(EDIT_JOURNAL)["kind"] == "delete_episodes"
    buf._release_lock()
    with pytest.raises(InterruptedEditError, match="interrupted delete_episodes"):
        ReplayBuffer.create_from_path(tmp_path / "e.zarr")
    with pytest.warns(RuntimeWarning, match="rolled back"):
        again = ReplayBuffer(str(tmp_path / "e.zarr"))
    _check(again, model)


MUTATORS = ("write", "resize", "create_array", "delete_array", "set_attrs")
#: name -> (the edit, what it does to a list of (episode, tag))
EDITS = {
    "delete": (lambda b: b.delete_episodes([1]), lambda m: [m[0]] + m[2:]),
    "trim": (lambda b: b.trim_episode(1, 1, 4),
             lambda m: [m[0], ({k: v[1:4] for k, v in m[1][0].items()}, 10)] + m[2:]),
    "keep": (lambda b: b.keep_episodes(np.array([True, False, True, False])), lambda m: [m[0], m[2]]),
}


def _contents(path):
    """Every array of ``data`` and ``meta`` and their attributes (None ones left out), read through
    zarr-python."""
    g = zarr.open_group(str(path), mode="r")
    arrays = {f"{grp}/{name}": np.asarray(a[:]).tolist() for grp in ("data", "meta") for name, a in g[grp].arrays()}
    attrs = {grp: {k: v for k, v in g[grp].attrs.asdict().items() if v is not None} for grp in ("data", "meta")}
    return arrays, attrs


def _log_mutations(store, monkeypatch, log, die_at=None):
    """Record every store mutation in ``log``; raise KeyboardInterrupt instead of mutation ``die_at``."""
    for name in MUTATORS:
        real = getattr(store, name)

        def call(*args, _real=real, _name=name, **kwargs):
            log.append((_name, args[:2]))
            if len(log) - 1 == die_at:
                raise KeyboardInterrupt(f"Ctrl-C at {_name}{args[:2]}")
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, call)


@pytest.fixture(scope="module")
def stats_store(tmp_path_factory):
    """A store with stored statistics and an imported ``stats.json`` (edits drop or update both)."""
    tmp = tmp_path_factory.mktemp("stats")
    buf = _build([4, 6, 3, 5], "zarr", tmp)
    buf.get_stats()
    buf.store.set_attrs("data", {"source_attrs": {"stats": {"x": {"mean": [1.0]}}, "fps": 10}})
    buf.close()
    return tmp / "e.zarr"


@pytest.mark.slow  # about 40 trials per edit
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_ctrl_c_at_any_write_leaves_the_old_or_the_new_store(stats_store, tmp_path, monkeypatch, edit):
    call, follow = EDITS[edit]
    model = [(_episode(i, n), i * 10) for i, n in enumerate([4, 6, 3, 5])]
    before = _contents(stats_store)
    log = []
    path = tmp_path / "e.zarr"
    shutil.copytree(stats_store, path)
    with ReplayBuffer(str(path)) as buf:  # the uninterrupted edit: its mutations, and where it commits
        _log_mutations(buf.store, monkeypatch, log)
        call(buf)
        monkeypatch.undo()
    commit = next(i for i, (name, args) in enumerate(log)  # the journal cleared (and the version recorded)
                  if name == "set_attrs" and args[0] == "meta" and EDIT_JOURNAL in args[1] and args[1][EDIT_JOURNAL] is None)
    assert 0 < commit < len(log) - 1
    for die_at in range(len(log)):
        shutil.rmtree(path)
        shutil.copytree(stats_store, path)
        with ReplayBuffer(str(path)) as buf:
            _log_mutations(buf.store, monkeypatch, [], die_at)
            with pytest.raises(KeyboardInterrupt, match="Ctrl-C at") as caught:
                call(buf)
            monkeypatch.undo()
            committed = die_at > commit
            _check(buf, follow(model) if committed else model)  # the buffer's own bookkeeping too
            assert ("had committed" if committed else "was rolled back") in "".join(caught.value.__notes__), die_at
        if not committed:
            assert _contents(path) == before, die_at  # exactly the pre-edit store: arrays and attributes
        ro = _open_read_only_quietly(path)
        _check(ro, follow(model) if committed else model)
        ro.close()


def test_a_second_ctrl_c_waits_for_the_rollback(tmp_path, monkeypatch):
    lengths = [4, 6, 3, 5]
    buf = _build(lengths, "zarr", tmp_path)
    model = [(_episode(i, n), i * 10) for i, n in enumerate(lengths)]
    _die_at_second_data_shrink(buf.store, monkeypatch)
    real_rollback = editing.rollback

    def ctrl_c_again(store, apply):  # a real SIGINT as the rollback begins
        os.kill(os.getpid(), signal.SIGINT)
        return real_rollback(store, apply)

    monkeypatch.setattr(editing, "rollback", ctrl_c_again)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test runner set
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            buf.delete_episodes([1])
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.undo()
    assert isinstance(caught.value.__context__, KeyboardInterrupt)  # the second, raised after the first
    _check(buf, model)  # ... once the rollback was done
    _open_read_only_quietly(tmp_path / "e.zarr").close()


def test_backups_of_an_edit_that_never_began_are_deleted(tmp_path):
    buf = _build([4, 6], "zarr", tmp_path)
    s = buf.store
    s.create_array("data", UNDO_PREFIX + "x", shape=(3,), dtype=np.int64)
    assert sorted(buf.keys()) == ["img", "s", "v", "x"]  # never a key
    buf.close()
    ro = ReplayBuffer.create_from_path(tmp_path / "e.zarr")
    assert sorted(ro.keys()) == ["img", "s", "v", "x"]
    ro.close()
    with pytest.warns(RuntimeWarning, match="leftover backup of an edit"):
        rw = ReplayBuffer(str(tmp_path / "e.zarr"))
    assert UNDO_PREFIX + "x" not in rw.store.list_arrays("data")
    _check(rw, [(_episode(0, 4), 0), (_episode(1, 6), 10)])


def test_deleting_the_last_episode_rewrites_only_the_tail(tmp_path, monkeypatch):
    lengths = [5] * 40
    buf = _build(lengths, "zarr", tmp_path)
    writes = []
    real_write = buf.store.write

    def logged(group, name, start, values):
        writes.append((group, name, start, len(values)))
        return real_write(group, name, start, values)

    monkeypatch.setattr(buf.store, "write", logged)
    buf.delete_episodes([39])
    data_rows = [(n, a, k) for g, n, a, k in writes if g == "data"]
    assert data_rows and min(a for n, a, k in data_rows if not n.startswith("_")) >= 195 - 4
    assert sum(k for n, a, k in data_rows if n == "x") <= 4  # the partial chunk before row 195, at most
    model = [(_episode(i, 5), i * 10) for i in range(39)]
    _check(buf, model)

