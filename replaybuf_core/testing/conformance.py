"""The conformance test classes.  Each needs a pytest fixture named ``harness`` returning a
:class:`~replaybuf_core.testing.BackendHarness`; subclass :class:`BufferConformance` (everything) or
the single classes below in a module of your backend's tests (class name starting with ``Test``).

Parametrise the ``harness`` fixture to run one test body over several backends/stores::

    @pytest.fixture(params=["memory", "local"])
    def harness(request, tmp_path): ...
"""

from __future__ import annotations

import os
import shutil
import warnings

import numpy as np
import pytest
from hypothesis import settings

from ..buffer import ReplayBuffer
from ..errors import CapabilityError, CorruptStoreError, ReadOnlyError
from ..protocol import CAP_CHUNKS, CAP_CODECS
from .data import assert_buffer_equal, assert_episode_equal, assert_snapshot_equal, make_episode, snapshot
from . import crash
from .edit_conformance import EditConformance, StatsConformance
from .harness import BackendHarness
from .stateful import DEFAULT_SETTINGS, run_state_machine


def filled(harness: BackendHarness, lengths=(3, 5, 2), strings: bool = False):
    """A buffer from ``harness.make_empty()`` holding episodes of ``lengths``; returns (buffer, episodes)."""
    buf = harness.make_empty()
    eps = [make_episode(n, seed=i, strings=strings) for i, n in enumerate(lengths)]
    for ep in eps:
        buf.add_episode(ep)
    return buf, eps


def _has(buf: ReplayBuffer, cap: str) -> bool:
    return cap in buf.store.capabilities


class ConstructorConformance:
    """Opening: empty buffers, reopen, and every CorruptStoreError of the constructor."""

    def test_empty_buffer(self, harness: BackendHarness):
        buf = harness.make_empty()
        assert buf.backend == harness.name
        assert buf.n_steps == 0 and buf.n_episodes == 0 and len(buf) == 0
        assert buf.keys() == [] and list(buf) == []
        assert buf.episode_ends.dtype == np.int64 and buf.episode_ends.shape == (0,)
        assert buf.episode_lengths.shape == (0,)
        assert buf.get_episode_idxs().shape == (0,)
        assert buf.get_steps_slice(None, None) == {}
        again = harness.reopen(buf)
        assert again.n_episodes == 0 and again.keys() == []

    def test_reopen_keeps_content(self, harness):
        buf, eps = filled(harness, strings=harness.supports_strings)
        again = harness.reopen(buf)
        assert again.backend == harness.name
        assert_buffer_equal(again, eps)

    def test_missing_episode_ends(self, harness):
        buf, _ = filled(harness)
        buf.store.delete_array("meta", "episode_ends")
        with pytest.raises(CorruptStoreError, match="episode_ends"):
            harness.reopen(buf)
        assert issubclass(CorruptStoreError, ValueError)

    @pytest.mark.parametrize("group", ["data", "meta"])
    def test_missing_group(self, harness, group):
        buf, _ = filled(harness)
        try:
            harness.remove_group(buf, group)
        except NotImplementedError:
            pytest.skip("the harness cannot remove a group")
        with pytest.raises(CorruptStoreError, match=group):
            harness.reopen(buf)

    def test_data_shorter_than_episode_ends(self, harness):
        buf, _ = filled(harness, lengths=(4, 4))
        buf.store.resize("data", "obs", 5)
        with pytest.raises(CorruptStoreError, match=r"obs.*5.*8"):
            harness.reopen(buf)

    def test_data_longer_is_trimmed_with_warning(self, harness):
        buf, eps = filled(harness, lengths=(4, 4))
        buf.store.resize("data", "obs", 11)
        with pytest.warns(RuntimeWarning, match="obs"):
            again = harness.reopen(buf)
        assert again.store.shape("data", "obs")[0] == 8
        assert_buffer_equal(again, eps)

    def test_empty_episode_ends_with_declared_arrays(self, harness):
        buf = harness.make_empty()
        buf.store.create_array("data", "obs", shape=(0, 3), dtype=np.dtype(np.float32))
        buf.store.create_array("data", "action", shape=(0,), dtype=np.dtype(np.int64))
        again = harness.reopen(buf)
        assert again.n_episodes == 0 and again.n_steps == 0
        assert again.keys() == ["action", "obs"]
        ep = make_episode(3)
        again.add_episode(ep)
        assert_buffer_equal(again, [ep])
        with pytest.raises(ValueError, match="step shape"):
            again.add_episode({"obs": np.zeros((2, 4), np.float32), "action": np.zeros(2, np.int64)})

    @pytest.mark.parametrize("ends", [[5, 3], [-1, 8], [3, 2, 8]])
    def test_bad_episode_ends(self, harness, ends):
        buf, _ = filled(harness, lengths=(3, 5))
        s = buf.store
        s.resize("meta", "episode_ends", len(ends))
        s.write("meta", "episode_ends", 0, np.asarray(ends, dtype=np.int64))
        with pytest.raises(CorruptStoreError, match="episode_ends"):
            harness.reopen(buf)

    def test_float_episode_ends(self, harness):
        buf, _ = filled(harness, lengths=(3,))
        s = buf.store
        s.delete_array("meta", "episode_ends")
        s.create_array("meta", "episode_ends", shape=(1,), dtype=np.dtype(np.float64))
        s.write("meta", "episode_ends", 0, np.array([3.0]))
        with pytest.raises(CorruptStoreError, match="integer"):
            harness.reopen(buf)

    def test_unknown_backend_name(self, harness):
        from ..errors import BackendNotFoundError

        buf = harness.make_empty()
        with pytest.raises(BackendNotFoundError, match=harness.name):
            ReplayBuffer(buf.root, backend="no-such-backend-xyz")


class PropertiesConformance:
    """Properties, the mapping interface and __repr__."""

    def test_properties(self, harness):
        buf, eps = filled(harness, lengths=(3, 5, 2))
        assert buf.n_steps == 10 and buf.n_episodes == 3 and len(buf) == 10
        assert buf.episode_ends.dtype == np.int64
        np.testing.assert_array_equal(buf.episode_ends, [3, 8, 10])
        np.testing.assert_array_equal(buf.episode_lengths, [3, 5, 2])
        assert not buf.episode_ends.flags.writeable
        with pytest.raises(ValueError):
            buf.episode_ends[0] = 7
        assert buf.data is not None and buf.meta is not None
        assert buf.store.name == buf.backend == harness.name
        if _has(buf, CAP_CHUNKS):
            assert buf.chunk_size == buf.store.chunks("data", buf.keys()[0])[0]
            assert isinstance(buf.chunk_size, int) and buf.chunk_size > 0
        else:
            assert buf.chunk_size is None

    def test_chunk_size_without_arrays(self, harness):
        assert harness.make_empty().chunk_size is None

    def test_mapping(self, harness):
        buf, eps = filled(harness)
        assert buf.keys() == ["action", "obs"] == list(buf)
        assert "obs" in buf and "nope" not in buf and 3 not in buf
        assert [k for k, _ in buf.items()] == buf.keys()
        assert len(buf.values()) == 2
        for k, arr in buf.items():
            assert tuple(arr.shape) == tuple(buf[k].shape) == (10,) + eps[0][k].shape[1:]
        np.testing.assert_array_equal(np.asarray(buf["obs"][0:3]), eps[0]["obs"])
        with pytest.raises(KeyError, match="nope"):
            buf["nope"]

    def test_repr(self, harness):
        buf, _ = filled(harness)
        r = repr(buf)
        assert isinstance(r, str) and "obs" in r and "action" in r

    def test_get_episode_idxs(self, harness):
        buf, _ = filled(harness, lengths=(3, 1, 2))
        idx = buf.get_episode_idxs()
        assert idx.dtype == np.int64
        np.testing.assert_array_equal(idx, [0, 0, 0, 1, 2, 2])
        assert buf.get_episode_idxs() is idx  # cached until the next mutation
        buf.add_episode(make_episode(2, 9))
        np.testing.assert_array_equal(buf.get_episode_idxs(), [0, 0, 0, 1, 2, 2, 3, 3])
        buf.drop_episode()
        buf.drop_episode()
        np.testing.assert_array_equal(buf.get_episode_idxs(), [0, 0, 0, 1])


class MetaConformance:
    """update_meta."""

    def test_update_meta_values(self, harness):
        buf, _ = filled(harness)
        out = buf.update_meta({"fps": 10, "scale": [1.5, 2.5], "arr": np.arange(6).reshape(2, 3)})
        assert out is not None
        np.testing.assert_array_equal(np.asarray(buf.meta["fps"][...]), 10)
        np.testing.assert_array_equal(np.asarray(buf.meta["scale"][...]), [1.5, 2.5])
        np.testing.assert_array_equal(np.asarray(buf.meta["arr"][...]), np.arange(6).reshape(2, 3))
        buf.update_meta({"fps": 30})  # replaces
        again = harness.reopen(buf)
        np.testing.assert_array_equal(np.asarray(again.meta["fps"][...]), 30)
        np.testing.assert_array_equal(np.asarray(again.meta["scale"][...]), [1.5, 2.5])
        np.testing.assert_array_equal(again.episode_ends, [3, 8, 10])

    def test_update_meta_string(self, harness):
        if not harness.supports_strings:
            pytest.skip("backend without strings")
        buf, _ = filled(harness)
        buf.update_meta({"task": "push-t", "names": ["a", "bc"]})
        again = harness.reopen(buf)
        assert np.asarray(again.meta["task"][...], dtype=object).tolist() == "push-t"
        assert np.asarray(again.meta["names"][...], dtype=object).tolist() == ["a", "bc"]

    @pytest.mark.parametrize("bad, exc", [
        ({"ok": 1, "obj": {"a": 1}}, TypeError),
        ({"ok": 1, "ragged": [[1, 2], [3]]}, (TypeError, ValueError)),
        ({"ok": 1, "episode_ends": [1, 2]}, ValueError),
        ({"ok": 1, "": 3}, ValueError),
        ({"ok": 1, "a/b": 3}, ValueError),
        ({"ok": 1, 5: 3}, TypeError),
    ])
    def test_update_meta_rejects_without_change(self, harness, bad, exc):
        buf, _ = filled(harness)
        before = snapshot(buf)
        with pytest.raises(exc):
            buf.update_meta(bad)
        assert_snapshot_equal(snapshot(buf), before)
        assert "ok" not in buf.store.list_arrays("meta")
        np.testing.assert_array_equal(harness.reopen(buf).episode_ends, [3, 8, 10])


class EpisodeConformance:
    """add_episode / extend / drop / pop / get_episode / get_episode_slice / get_steps_slice."""

    def test_add_and_get(self, harness):
        buf, eps = filled(harness, lengths=(3, 5, 2), strings=harness.supports_strings)
        assert_buffer_equal(buf, eps)
        for i in range(-3, 3):
            assert_episode_equal(buf.get_episode(i), eps[i])
            assert_episode_equal(buf.get_episode(np.int64(i), copy=True), eps[i])

    def test_extend_is_add_episode(self, harness):
        buf = harness.make_empty()
        ep = make_episode(4, 1)
        buf.extend(ep)
        assert_buffer_equal(buf, [ep])

    def test_get_episode_slice(self, harness):
        buf, _ = filled(harness, lengths=(3, 5, 2))
        assert buf.get_episode_slice(0) == slice(0, 3)
        assert buf.get_episode_slice(1) == slice(3, 8)
        assert buf.get_episode_slice(-1) == slice(8, 10)  # the last episode, not the whole buffer
        assert buf.get_episode_slice(-3) == slice(0, 3)

    @pytest.mark.parametrize("idx", [3, 4, -4, 100])
    def test_get_episode_out_of_range(self, harness, idx):
        buf, _ = filled(harness, lengths=(3, 5, 2))
        with pytest.raises(IndexError, match=rf"{idx}.*\b3 episodes"):
            buf.get_episode(idx)
        with pytest.raises(IndexError, match=str(idx)):
            buf.get_episode_slice(idx)

    def test_get_episode_on_empty(self, harness):
        buf = harness.make_empty()
        with pytest.raises(IndexError, match="0 episodes"):
            buf.get_episode(0)
        with pytest.raises(IndexError):
            buf.get_episode_slice(-1)

    @pytest.mark.parametrize("idx", [1.0, True, "0", None])
    def test_get_episode_bad_type(self, harness, idx):
        buf, _ = filled(harness)
        with pytest.raises(TypeError):
            buf.get_episode(idx)

    def test_get_episode_copy_is_independent(self, harness):
        buf, eps = filled(harness)
        ep = buf.get_episode(1, copy=True)
        ep["obs"][...] = 1234.0
        ep["action"][...] = -1
        assert_episode_equal(buf.get_episode(1), eps[1])

    def test_get_steps_slice(self, harness):
        buf, eps = filled(harness, lengths=(3, 5, 2), strings=harness.supports_strings)
        flat = {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}
        for start, stop, step in [(None, None, None), (2, 7, None), (-4, None, None), (0, 10, 3),
                                  (1, -1, 2), (8, 3, None), (20, 30, None), (-100, 100, 4)]:
            got = buf.get_steps_slice(start, stop, step)
            assert_episode_equal(got, {k: v[start:stop:step] for k, v in flat.items()})
            got = buf.get_steps_slice(start, stop, step, copy=True)
            assert_episode_equal(got, {k: v[start:stop:step] for k, v in flat.items()})

    @pytest.mark.parametrize("step", [0, -1])
    def test_get_steps_slice_bad_step(self, harness, step):
        buf, _ = filled(harness)
        with pytest.raises(ValueError, match="step"):
            buf.get_steps_slice(0, 5, step)

    def test_drop_episode(self, harness):
        buf, eps = filled(harness)
        buf.drop_episode()
        assert_buffer_equal(buf, eps[:2])
        assert buf.store.shape("data", "obs")[0] == 8
        assert_buffer_equal(harness.reopen(buf), eps[:2])

    def test_pop_episode(self, harness):
        buf, eps = filled(harness, strings=harness.supports_strings)
        got = buf.pop_episode()
        assert_episode_equal(got, eps[2])
        got["obs"][...] = 0  # a copy: does not touch storage
        assert_buffer_equal(buf, eps[:2])
        assert_episode_equal(buf.pop_episode(), eps[1])
        assert_episode_equal(buf.pop_episode(), eps[0])
        assert buf.n_episodes == 0 and buf.n_steps == 0
        assert buf.keys() == sorted(eps[0])  # arrays stay, with 0 rows
        with pytest.raises(IndexError, match="empty"):
            buf.pop_episode()
        with pytest.raises(IndexError, match="empty"):
            buf.drop_episode()

    def test_dropped_rows_do_not_reappear(self, harness):
        buf = harness.make_empty()
        buf.add_episode({"x": np.arange(1, 8, dtype=np.int64)})
        buf.drop_episode()
        buf.add_episode({"x": np.full(2, 50, np.int64)})
        buf.store.resize("data", "x", 7)  # grow behind the buffer's back: rows must hold the fill
        got = np.asarray(buf.store.read("data", "x", 0, 7))
        np.testing.assert_array_equal(got[:2], [50, 50])
        assert not np.isin(got[2:], np.arange(1, 8)).any(), got

    def test_same_kind_cast(self, harness):
        buf = harness.make_empty()
        buf.add_episode({"x": np.zeros((2, 2), np.float32), "i": np.zeros(2, np.int64)})
        buf.add_episode({"x": np.full((3, 2), 0.5, np.float64), "i": np.ones(3, np.int32)})
        ep = buf.get_episode(1)
        assert ep["x"].dtype == np.float32 and ep["i"].dtype == np.int64
        np.testing.assert_array_equal(ep["x"], 0.5)

    def test_dtypes_round_trip(self, harness):
        buf = harness.make_empty()
        ep = {
            "u8": np.arange(12, dtype=np.uint8).reshape(4, 3),
            "i64": np.array([-(2**62), 0, 1, 2**62], dtype=np.int64),
            "f16": np.array([0.1, -2, np.inf, 65504], dtype=np.float16),
            "f32": np.array([np.nan, -0.0, 1e-38, 3e38], dtype=np.float32),
            "f64": np.array([np.pi, -np.e, 1e-300, np.nan], dtype=np.float64),
            "b": np.array([True, False, True, True]),
        }
        if harness.supports_strings:
            ep["s"] = np.array(["", "ascii", "ünïcödé", "x" * 100], dtype=object)
        buf.add_episode(ep)
        assert_buffer_equal(harness.reopen(buf), [ep])

    def test_unicode_str_arrays_become_object(self, harness):
        if not harness.supports_strings:
            pytest.skip("backend without strings")
        buf = harness.make_empty()
        buf.add_episode({"s": np.array(["a", "bc"])})  # dtype <U2
        buf.add_episode({"s": np.array(["def"], dtype=object)})
        got = buf.get_steps_slice(None, None)["s"]
        assert got.dtype == object and got.tolist() == ["a", "bc", "def"]
        assert harness.reopen(buf).get_episode(1)["s"].tolist() == ["def"]

    def test_add_episode_rollback_on_write_failure(self, harness, monkeypatch):
        if not harness.supports_write_injection:
            pytest.skip("the harness cannot inject write failures")
        buf, eps = filled(harness)
        before = snapshot(buf)
        store = buf.store
        real_write = store.write
        calls = []

        def failing_write(group, name, start, values):
            calls.append((group, name))
            if len(calls) == 2:
                raise OSError("injected failure")
            return real_write(group, name, start, values)

        monkeypatch.setattr(store, "write", failing_write)
        with pytest.raises(OSError, match="injected"):
            buf.add_episode(make_episode(4, 99))
        monkeypatch.undo()
        assert len(calls) == 2
        assert_snapshot_equal(snapshot(buf), before)
        buf.add_episode(make_episode(2, 5))
        assert_buffer_equal(harness.reopen(buf), eps + [make_episode(2, 5)])


def _bad_episodes():
    good = make_episode(3, 7)
    return [
        ("ragged", {"obs": good["obs"], "action": good["action"][:2]}, ValueError),
        ("zero-d", {"obs": good["obs"], "action": np.int64(3)}, ValueError),
        ("empty-dict", {}, ValueError),
        ("zero-length", {"obs": good["obs"][:0], "action": good["action"][:0]}, ValueError),
        ("trailing-shape", {"obs": np.zeros((3, 4), np.float32), "action": good["action"]}, ValueError),
        ("trailing-rank", {"obs": np.zeros((3, 3, 1), np.float32), "action": good["action"]}, ValueError),
        ("dtype-kind-float-to-int", {"obs": good["obs"], "action": good["action"].astype(np.float64)},
         TypeError),
        ("dtype-str-to-float", {"obs": np.array([["a"] * 3] * 3), "action": good["action"]}, TypeError),
        ("missing-key", {"obs": good["obs"]}, ValueError),
        ("extra-key", {**good, "extra": np.zeros(3)}, ValueError),
        ("object-non-str", {**good, "o": np.array([1, "a", None], dtype=object)}, TypeError),
        ("empty-key", {**good, "": np.zeros(3)}, ValueError),
        ("slash-key", {**good, "a/b": np.zeros(3)}, ValueError),
        ("non-str-key", {**good, 1: np.zeros(3)}, TypeError),
        ("not-a-mapping", [good["obs"]], TypeError),
        ("datetime", {**good, "t": np.array(["2020-01-01"] * 3, dtype="datetime64[D]")}, TypeError),
    ]


class ValidateBeforeMutateConformance:
    """Every rejected call raises the specific exception and leaves the buffer unchanged."""

    @pytest.mark.parametrize("name, episode, exc", _bad_episodes(), ids=[b[0] for b in _bad_episodes()])
    def test_bad_episode(self, harness, name, episode, exc):
        buf, eps = filled(harness)
        before = snapshot(buf)
        with pytest.raises(exc):
            buf.add_episode(episode)
        assert_snapshot_equal(snapshot(buf), before)
        assert_buffer_equal(harness.reopen(buf), eps)

    @pytest.mark.parametrize("episode, exc", [
        ({"obs": np.zeros((2, 3)), "action": np.zeros(3)}, ValueError),
        ({"obs": np.zeros((0, 3))}, ValueError),
        ({"obs": np.array(5.0)}, ValueError),
        ({"o": np.array([b"x"], dtype=object)}, TypeError),
        ({"ok": np.zeros(2), "": np.zeros(2)}, ValueError),
    ])
    def test_bad_first_episode(self, harness, episode, exc):
        buf = harness.make_empty()
        with pytest.raises(exc):
            buf.add_episode(episode)
        assert buf.n_episodes == 0 and buf.keys() == []
        assert harness.reopen(buf).keys() == []

    @pytest.mark.parametrize("chunks, exc", [
        ({"new": (2,)}, ValueError),            # wrong rank
        ({"new": (2, 3, 1)}, ValueError),
        ({"new": (0, 3)}, ValueError),          # zero
        ({"new": (-2, 3)}, ValueError),         # negative
        ({"new": (2.0, 3)}, TypeError),         # float
        ({"new": (True, 3)}, TypeError),        # bool
        ({"new": "23"}, TypeError),
        ({"nope": (2, 3)}, KeyError),           # key not in the episode
    ])
    def test_bad_chunks_for_new_key(self, harness, chunks, exc):
        buf = harness.make_empty()
        with pytest.raises(exc):
            buf.add_episode({"new": np.zeros((4, 3)), "other": np.zeros(4)}, chunks=chunks)
        assert buf.keys() == [] and buf.n_episodes == 0

    @pytest.mark.parametrize("compressors, exc", [
        ({"new": "no-such-preset"}, ValueError),
        ({"new": 3}, TypeError),
        ({"nope": "default"}, KeyError),
    ])
    def test_bad_compressor_for_new_key(self, harness, compressors, exc):
        empty = harness.make_empty()
        with pytest.raises(exc):
            empty.add_episode({"new": np.zeros(3), "other": np.zeros(3)}, compressors=compressors)
        assert empty.keys() == [] and empty.n_episodes == 0

    @pytest.mark.parametrize("compressors, exc", [
        ({"obs": "no-such-preset"}, ValueError),
        ({"obs": 3}, TypeError),
        ({"nope": "default"}, KeyError),
    ])
    def test_bad_compressor_for_existing_key(self, harness, compressors, exc):
        buf, eps = filled(harness)
        before = snapshot(buf)
        with pytest.raises(exc):
            buf.add_episode(make_episode(2, 5), compressors=compressors)
        assert_snapshot_equal(snapshot(buf), before)

    def test_good_chunks_for_new_key(self, harness):
        buf = harness.make_empty()
        buf.add_episode({"new": np.zeros((4, 3)), "other": np.zeros(4)},
                        chunks={"new": (2, 3)}, compressors={"new": "disk", "other": None})
        if _has(buf, CAP_CHUNKS):
            assert buf.get_chunks()["new"] == (2, 3)
        assert buf.n_steps == 4


class ReadOnlyConformance:
    """Read-only opens: reads work, every write raises ReadOnlyError and changes nothing."""

    def test_read_only(self, harness):
        if not harness.supports_read_only:
            pytest.skip("backend without read-only opens")
        buf, eps = filled(harness, strings=harness.supports_strings)
        ro = harness.reopen_read_only(buf)
        assert ro.read_only
        assert_buffer_equal(ro, eps)
        before = snapshot(ro)
        assert issubclass(ReadOnlyError, RuntimeError)
        with pytest.raises(ReadOnlyError):
            ro.add_episode(make_episode(2, 1, strings=harness.supports_strings))
        with pytest.raises(ReadOnlyError):
            ro.drop_episode()
        with pytest.raises(ReadOnlyError):
            ro.pop_episode()
        with pytest.raises(ReadOnlyError):
            ro.update_meta({"a": 1})
        if _has(ro, CAP_CHUNKS):
            with pytest.raises(ReadOnlyError):
                ro.set_chunks({"obs": (1, 3)})
        if _has(ro, CAP_CODECS):
            with pytest.raises(ReadOnlyError):
                ro.set_compressors({"obs": "disk"})
        assert_snapshot_equal(snapshot(ro), before)

    def test_read_only_hides_interrupted_append(self, harness):
        if not harness.supports_read_only:
            pytest.skip("backend without read-only opens")
        buf, eps = filled(harness, lengths=(2, 2))
        buf.store.resize("data", "obs", 6)
        with pytest.warns(RuntimeWarning, match="hidden"):
            ro = harness.reopen_read_only(buf)
        assert ro.n_steps == 4
        assert_buffer_equal(ro, eps)


class ChunkCodecConformance:
    """get/set_chunks and get/set_compressors, or CapabilityError when the backend lacks them."""

    def test_chunks(self, harness):
        buf, eps = filled(harness, lengths=(5, 6, 7), strings=harness.supports_strings)
        if not _has(buf, CAP_CHUNKS):
            assert issubclass(CapabilityError, RuntimeError)
            with pytest.raises(CapabilityError, match="chunks"):
                buf.get_chunks()
            with pytest.raises(CapabilityError, match="chunks"):
                buf.set_chunks({"obs": (2, 3)})
            return
        chunks = buf.get_chunks()
        assert set(chunks) == set(buf.keys())
        assert all(isinstance(c, tuple) and len(c) == len(buf.store.shape("data", k)) for k, c in chunks.items())
        buf.set_chunks({"obs": (4, 3), "action": (3,)})
        assert buf.get_chunks()["obs"] == (4, 3) and buf.get_chunks()["action"] == (3,)
        assert not [n for n in buf.store.list_arrays("data") if n.startswith("_temp")]
        assert_buffer_equal(buf, eps)
        again = harness.reopen(buf)
        assert again.get_chunks()["obs"] == (4, 3)
        assert_buffer_equal(again, eps)
        assert again.keys() == buf.keys()

    @pytest.mark.parametrize("chunks, exc", [
        ({"obs": (2,)}, ValueError), ({"obs": (0, 3)}, ValueError), ({"obs": (-1, 3)}, ValueError),
        ({"obs": (2.0, 3)}, TypeError), ({"obs": (False, 3)}, TypeError),
        ({"action": (2,), "nope": (2,)}, KeyError), ({"action": (2,), "obs": (1,)}, ValueError),
    ])
    def test_bad_set_chunks(self, harness, chunks, exc):
        buf, eps = filled(harness)
        if not _has(buf, CAP_CHUNKS):
            pytest.skip("backend without chunks")
        old = buf.get_chunks()
        before = snapshot(buf)
        with pytest.raises(exc):
            buf.set_chunks(chunks)
        assert buf.get_chunks() == old
        assert_snapshot_equal(snapshot(buf), before)

    def test_set_chunks_failure_keeps_original(self, harness, monkeypatch):
        buf, eps = filled(harness, lengths=(5, 6))
        if not _has(buf, CAP_CHUNKS) or not harness.supports_write_injection:
            pytest.skip("backend without chunks")
        old = buf.get_chunks()
        before = snapshot(buf)

        def failing_write(group, name, start, values):
            raise OSError("injected failure mid-rechunk")

        monkeypatch.setattr(buf.store, "write", failing_write)
        with pytest.raises(OSError, match="injected"):
            buf.set_chunks({"obs": (2, 3)})
        monkeypatch.undo()
        assert buf.get_chunks()["obs"] == old["obs"]
        assert_snapshot_equal(snapshot(buf), before)
        buf.set_chunks({"obs": (2, 3)})  # a retry cleans the leftover temporary array up
        assert buf.get_chunks()["obs"] == (2, 3)
        assert not [n for n in buf.store.list_arrays("data") if n.startswith("_temp")]
        assert_buffer_equal(buf, eps)

    def test_compressors(self, harness):
        buf, eps = filled(harness)
        if not _has(buf, CAP_CODECS):
            with pytest.raises(CapabilityError):
                buf.get_compressors()
            with pytest.raises(CapabilityError):
                buf.set_compressors({"obs": "disk"})
            return
        assert set(buf.get_compressors()) == set(buf.keys())
        chunks = buf.get_chunks() if _has(buf, CAP_CHUNKS) else None
        buf.set_compressors({"obs": "disk"})
        disk = ReplayBuffer.resolve_compressor("disk")
        got = buf.get_compressors()["obs"]
        assert got is not None
        if hasattr(got, "cname"):
            assert str(getattr(got.cname, "value", got.cname)) == disk.cname == "zstd"
        if chunks is not None:
            assert buf.get_chunks() == chunks
        assert not [n for n in buf.store.list_arrays("data") if n.startswith("_temp")]
        assert_buffer_equal(harness.reopen(buf), eps)
        with pytest.raises(ValueError, match="unknown compressor"):
            buf.set_compressors({"obs": "fast-please"})
        with pytest.raises(KeyError):
            buf.set_compressors({"nope": "disk"})


class CopyConformance:
    """copy_from_store (into memory) and save_to_store round trips from this backend."""

    def test_copy_from_store_to_memory(self, harness):
        buf, eps = filled(harness, strings=harness.supports_strings)
        buf.update_meta({"fps": 10})
        mem = ReplayBuffer.copy_from_store(buf.root)
        assert mem.backend == "numpy"
        assert_buffer_equal(mem, eps)
        np.testing.assert_array_equal(np.asarray(mem.meta["fps"]), 10)
        # the source is untouched and still writable
        assert_buffer_equal(buf, eps)
        buf.add_episode(make_episode(1, 3, strings=harness.supports_strings))
        assert mem.n_episodes == 3

    def test_copy_from_store_keys(self, harness):
        buf, eps = filled(harness)
        mem = ReplayBuffer.copy_from_store(buf.root, keys=["obs"])
        assert mem.keys() == ["obs"]
        assert_buffer_equal(mem, [{"obs": e["obs"]} for e in eps])
        with pytest.raises(KeyError, match="nope"):
            ReplayBuffer.copy_from_store(buf.root, keys=["nope"])
        with pytest.raises(ValueError, match="if_exists"):
            ReplayBuffer.copy_from_store(buf.root, if_exists="whatever")

    def _new_store(self, harness):
        try:
            return harness.new_store()
        except NotImplementedError:
            pytest.skip("the harness has no new_store()")

    def test_save_to_store_same_backend(self, harness):
        buf, eps = filled(harness, strings=harness.supports_strings)
        buf.update_meta({"fps": 15})
        store = self._new_store(harness)
        out = buf.save_to_store(store, backend=harness.name)
        assert out is store
        again = ReplayBuffer(store, backend=harness.name)
        assert again.backend == harness.name
        assert_buffer_equal(again, eps)
        np.testing.assert_array_equal(np.asarray(again.meta["fps"][...]), 15)
        if _has(buf, CAP_CHUNKS) and _has(again, CAP_CHUNKS):
            assert again.get_chunks() == buf.get_chunks()
        with pytest.raises(FileExistsError):
            buf.save_to_store(store, backend=harness.name, if_exists="raise")
        with pytest.raises(ValueError, match="store"):
            buf.save_to_store(None)

    def test_memory_to_backend(self, harness):
        src = ReplayBuffer.create_empty_numpy()
        eps = [make_episode(n, i, strings=harness.supports_strings) for i, n in enumerate((2, 3))]
        for ep in eps:
            src.add_episode(ep)
        store = self._new_store(harness)
        got = ReplayBuffer.copy_from_store(src.root, store=store, backend=harness.name)
        assert got.backend == harness.name
        assert_buffer_equal(got, eps)
        assert_buffer_equal(ReplayBuffer(store, backend=harness.name), eps)

    def test_save_failure_leaves_source_intact(self, harness, monkeypatch):
        buf, eps = filled(harness)
        store = self._new_store(harness)
        dst_entry = __import__("replaybuf_core.registry", fromlist=["get_backend"]).get_backend(harness.name)
        real_create = dst_entry.create
        calls = []

        def create(*a, **k):
            dst = real_create(*a, **k)
            real_write = dst.write

            def failing_write(group, name, start, values):
                calls.append(name)
                if len(calls) == 2:
                    raise OSError("injected failure mid-copy")
                return real_write(group, name, start, values)

            dst.write = failing_write
            return dst

        monkeypatch.setattr(dst_entry, "create", create)
        before = snapshot(buf)
        with pytest.raises(OSError, match="injected"):
            buf.save_to_store(store, backend=harness.name)
        monkeypatch.undo()
        assert_snapshot_equal(snapshot(buf), before)
        # the half-written destination is not a valid buffer with wrong content: episode_ends is
        # committed last, so it is missing (or empty)
        try:
            partial = ReplayBuffer(store, backend=harness.name)
        except (CorruptStoreError, FileNotFoundError):
            pass
        else:
            assert partial.n_episodes == 0


class StorageProtocolConformance:
    """The StorageBackend verbs themselves (what ReplayBuffer relies on), through ``buffer.store``."""

    def test_array_verbs(self, harness):
        s = harness.make_empty().store
        assert s.has_group("data") and s.has_group("meta")
        s.create_array("data", "a", shape=(4, 2), dtype=np.dtype(np.int32), fill_value=0)
        assert s.has_array("data", "a") and s.list_arrays("data") == ["a"]
        assert s.shape("data", "a") == (4, 2) and np.dtype(s.dtype("data", "a")) == np.int32
        with pytest.raises(ValueError):
            s.create_array("data", "a", shape=(1,), dtype=np.dtype(np.int32))
        s.write("data", "a", 1, np.array([[1, 2], [3, 4]], np.int32))
        np.testing.assert_array_equal(s.read("data", "a", 0, 4), [[0, 0], [1, 2], [3, 4], [0, 0]])
        np.testing.assert_array_equal(s.read("data", "a", 0, 4, 2), [[0, 0], [3, 4]])
        got = s.read_ranges("data", "a", [0, 2], [1, 4])
        np.testing.assert_array_equal(got[0], [[0, 0]])
        np.testing.assert_array_equal(got[1], [[3, 4], [0, 0]])
        s.rename_array("data", "a", "b")
        assert not s.has_array("data", "a") and s.has_array("data", "b")
        with pytest.raises(KeyError):
            s.get_array("data", "a")
        s.resize("data", "b", 2)
        s.resize("data", "b", 5)
        np.testing.assert_array_equal(s.read("data", "b", 0, 5), [[0, 0], [1, 2], [0, 0], [0, 0], [0, 0]])
        s.delete_array("data", "b")
        assert not s.has_array("data", "b") and s.list_arrays("data") == []
        with pytest.raises(KeyError):
            s.shape("data", "b")
        s.create_array("data", "b", shape=(1,), dtype=np.dtype(np.float64))  # the name is free again
        assert s.shape("data", "b") == (1,)

    def test_optional_async_verbs(self, harness):
        """``write_async`` / ``read_rows_async``, when a backend has them, end as their synchronous
        twins do; reads overlapping a background write see it."""
        s = harness.make_empty().store
        write_async = getattr(s, "write_async", None)
        read_rows_async = getattr(s, "read_rows_async", None)
        if write_async is None and read_rows_async is None:
            pytest.skip("backend without the optional async verbs")
        n = 64
        values = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        chunks = (4, 6) if CAP_CHUNKS in s.capabilities else None
        s.create_array("data", "a", shape=(n, 6), dtype=np.dtype(np.float32), chunks=chunks, fill_value=0)
        if write_async is not None:
            futures = [write_async("data", "a", i, values[i:i + 32]) for i in range(0, n, 32)]
            np.testing.assert_array_equal(s.read("data", "a", 0, n), values)  # waits where it must
            for f in futures:
                f.result()
            with pytest.raises(IndexError):
                write_async("data", "a", n - 1, values[:2])  # rows that do not exist: before anything
        else:
            s.write("data", "a", 0, values)
        if read_rows_async is not None:
            rows = np.array([[5, 0, 63], [17, 17, 40]])
            out = np.empty(rows.shape + (6,), np.float32)
            assert read_rows_async("data", "a", rows, out).result() is out
            np.testing.assert_array_equal(out, values[rows])

    def test_attrs(self, harness):
        s = harness.make_empty().store
        s.set_attrs("meta", {"x": 1, "y": "z"})
        assert s.get_attrs("meta")["x"] == 1 and s.get_attrs("meta")["y"] == "z"

    def test_rechunk_twice(self, harness):
        buf, eps = filled(harness, lengths=(5, 6))
        if not _has(buf, CAP_CHUNKS):
            pytest.skip("backend without chunks")
        for ck in (2, 3, 2):
            buf.set_chunks({"obs": (ck, 3)})
            assert buf.get_chunks()["obs"] == (ck, 3)
        if _has(buf, CAP_CODECS):
            buf.set_compressors({"obs": "disk", "action": None})
            buf.set_compressors({"obs": "default"})
        assert buf.keys() == ["action", "obs"]
        assert_buffer_equal(buf, eps)
        assert_buffer_equal(harness.reopen(buf), eps)


class CrashConformance:
    """The promise of a ``"persistent"`` backend: SIGKILL a process appending (``add_episode``, an
    ``EpisodeWriter``) or removing episodes at a random moment, and the store opens again holding
    exactly the committed episodes, bit-exact, losing at most the one in flight, and appending goes
    on (:mod:`replaybuf_core.testing.crash`; ``benchmarks.soak`` runs the same trials by the
    hundred).  Needs :meth:`BackendHarness.crash_path`; skipped when it returns None."""

    #: kill trials per kind (each starts a Python process: about a second)
    crash_trials = 3

    @pytest.mark.parametrize("kind", crash.BACKEND_KINDS)
    def test_sigkill(self, harness, kind):
        path = harness.crash_path()
        if path is None:
            pytest.skip("the harness has no crash_path (not a persistent backend)")
        crash.create(path, kind=kind, backend=harness.name)
        rng = np.random.default_rng(sum(map(ord, kind)))
        for _ in range(harness.crash_trials or self.crash_trials):
            r = crash.run_trial(kind, path, rng, max_delay=0.6)
            if not harness.kill_safe and not r.clean_open and (r.error or "").startswith("open failed"):
                # best effort: the damage is refused at open, never read as data; start afresh
                if os.path.isfile(path):
                    os.remove(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
                crash.create(path, kind=kind, backend=harness.name)
                continue
            assert r.clean_open and r.lost == 0, f"{kind}: {r.error} (lost {r.lost}, {r.done} calls done)"


class StatefulConformance:
    """The hypothesis state machine (see :func:`~replaybuf_core.testing.make_state_machine`)."""

    def test_state_machine(self, harness):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no interrupted-append traces expected
            n = harness.state_machine_examples
            run_state_machine(harness, None if n is None else settings(DEFAULT_SETTINGS, max_examples=n))


class BufferConformance(
    ConstructorConformance,
    PropertiesConformance,
    MetaConformance,
    EpisodeConformance,
    ValidateBeforeMutateConformance,
    ReadOnlyConformance,
    ChunkCodecConformance,
    CopyConformance,
    StorageProtocolConformance,
    StatefulConformance,
    CrashConformance,
    EditConformance,
    StatsConformance,
):
    """The whole suite: subclass it as ``class TestMyBackend(BufferConformance): pass`` next to a
    ``harness`` fixture."""
