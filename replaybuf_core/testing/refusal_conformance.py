"""Conformance of refusals: every bad episode, chunk or compressor raises its specific exception
with the buffer unchanged, and a read-only buffer refuses every write.  Part of
:class:`~replaybuf_core.testing.conformance.BufferConformance`."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS

from .data import assert_buffer_equal, assert_snapshot_equal, make_episode, snapshot
from .harness import filled, has_capability


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
        if has_capability(buf, CAP_CHUNKS):
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
        if has_capability(ro, CAP_CHUNKS):
            with pytest.raises(ReadOnlyError):
                ro.set_chunks({"obs": (1, 3)})
        if has_capability(ro, CAP_CODECS):
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
