"""The conformance test classes.  Each needs a pytest fixture named ``harness`` returning a
:class:`~replaybuf_core.testing.BackendHarness`; subclass :class:`BufferConformance` (everything) or
the single classes (here and in the ``*_conformance`` modules beside it) in a module of your
backend's tests (class name starting with ``Test``).

Parametrise the ``harness`` fixture to run one test body over several backends/stores::

    @pytest.fixture(params=["memory", "local"])
    def harness(request, tmp_path): ...
"""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.protocol import CAP_CHUNKS
from replaybuf_core.store.buffer import ReplayBuffer

from .data import assert_buffer_equal, assert_episode_equal, assert_snapshot_equal, make_episode, snapshot
from .durability_conformance import CrashConformance, StatefulConformance
from .edit_conformance import EditConformance, StatsConformance
from .harness import BackendHarness, filled, has_capability
from .layout_conformance import ChunkCodecConformance, CopyConformance, StorageProtocolConformance
from .refusal_conformance import ReadOnlyConformance, ValidateBeforeMutateConformance

__all__ = ["BufferConformance", "ConstructorConformance", "PropertiesConformance", "MetaConformance",
           "EpisodeConformance"]


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
        from replaybuf_core.errors import BackendNotFoundError

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
        if has_capability(buf, CAP_CHUNKS):
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
