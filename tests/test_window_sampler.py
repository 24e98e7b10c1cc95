"""Tests for the O(episodes) window index and the per-key window sampler.

Expected values come from plain-Python models written from the rules (LeRobot's every-step anchors
with clamped offsets; diffusion_policy's pad_before/pad_after window range) and from the
diffusion_policy table ``create_indices`` (kept as its own kernel), never from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.sampling.sampler_indices import _create_indices_numpy
from replaybuf_core.sampling.window_index import WindowIndex
from replaybuf_core.sampling.window_sampler import WindowSampler, delta_timestamps_to_steps

lengths_st = st.lists(st.integers(1, 12), min_size=1, max_size=8)


def _buffer(lengths, backend="numpy", tmp_path=None):
    """Episode e, step j holds x = 1000 * e + j + 1 (never 0, so zero padding shows) and a string."""
    buf = ReplayBuffer.create_empty_numpy()
    for e, n in enumerate(lengths):
        j = np.arange(n)
        buf.add_episode({"x": (1000 * e + j + 1).astype(np.int64),
                         "v": np.stack([1000 * e + j + 1, -(1000 * e + j + 1)], 1).astype(np.float32),
                         "s": np.array([f"e{e}s{i}" for i in j], dtype=object)})
    if backend == "zarr":
        buf.save_to_path(tmp_path / "w.zarr")
        return ReplayBuffer.create_from_path(tmp_path / "w.zarr")
    return buf


# ---------------------------------------------------------------------------- WindowIndex
@settings(max_examples=300, deadline=None)
@given(lengths=lengths_st, seq=st.integers(1, 6), pb=st.integers(0, 7), pa=st.integers(0, 7),
       skip=st.integers(0, 3), data=st.data())
def test_window_rows_equal_the_diffusion_policy_table(lengths, seq, pb, pa, skip, data):
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(lengths), max_size=len(lengths))))
    buf = _buffer(lengths)
    sampler = SequenceSampler(buf, seq, pad_before=pb, pad_after=pa, skip_initial=skip, episode_mask=mask)
    pb_c, pa_c = min(pb, seq - 1), min(pa, seq - 1)
    table = _create_indices_numpy(np.asarray(buf.episode_ends[:]), mask, seq, pb_c, pa_c, skip)
    assert len(sampler) == len(table)
    np.testing.assert_array_equal(sampler.window_rows(np.arange(len(table))).reshape(-1, 4), table)
    np.testing.assert_array_equal(sampler.indices, table)
    if len(table):
        np.testing.assert_array_equal(sampler.window_rows([-1])[0], table[-1])


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 12), max_size=10), seq=st.integers(1, 6), pb=st.integers(0, 5),
       pa=st.integers(0, 5))
def test_window_index_with_empty_episodes_locates_like_the_table(lengths, seq, pb, pa):
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    mask = np.ones(len(lengths), dtype=bool)
    table = _create_indices_numpy(ends, mask, seq, pb, pa, 0)
    wi = WindowIndex(ends, -pb, seq - pa)
    assert len(wi) == len(table) and wi.window_counts.sum() == len(table)
    episode, t = wi.locate(np.arange(len(table)))
    starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
    first = np.maximum(t, 0)
    np.testing.assert_array_equal(starts[episode] + first, table[:, 0])
    np.testing.assert_array_equal(first - t, table[:, 2])


def test_window_index_memory_is_per_episode_not_per_window():
    lengths = np.full(100_000, 3460, dtype=np.int64)  # 346 M steps
    wi = WindowIndex(np.cumsum(lengths), -1, 16 - 7)
    assert wi.n_windows == 100_000 * (3460 - 16 + 1 + 1 + 7)
    assert wi.nbytes < 4_000_000  # the table would be 32 bytes x 346 M windows = 11 GB
    ep, t = wi.locate(np.array([0, wi.n_windows - 1]))
    assert ep.tolist() == [0, 99_999] and t.tolist() == [-1, 3460 - 16 + 7]
    assert wi.episode_windows(1) == range(3453, 2 * 3453)


def test_window_index_refuses_a_mismatched_index():
    buf = _buffer([5, 6])
    other = SequenceSampler(_buffer([5, 7]), 3).window_index
    with pytest.raises(ValueError, match="built for other episodes"):
        SequenceSampler(buf, 3, window_index=other)
    with pytest.raises(ValueError, match="built for other episodes"):
        SequenceSampler(buf, 3, pad_before=1, window_index=SequenceSampler(buf, 3).window_index)
    shared = SequenceSampler(buf, 3, pad_after=1).window_index
    assert SequenceSampler(buf, 3, pad_after=1, window_index=shared).window_index is shared
    with pytest.raises(IndexError, match="window index 99 out of range"):
        SequenceSampler(buf, 3).window_rows([99])


# ------------------------------------------------------------------------- WindowSampler
def _model(lengths, deltas, rule, pb=None, pa=None, mask=None, zero=False):
    """Samples as a plain loop over episodes and anchors, from the rules in words."""
    out = []
    lo = min([0] + [min(d) for d in deltas.values()])
    hi = max([0] + [max(d) for d in deltas.values()])
    for e, n in enumerate(lengths):
        if n == 0 or (mask is not None and not mask[e]):
            continue
        for t in range(-50, n + 50):
            if rule == "lerobot":
                ok = 0 <= t < n
            else:
                span = hi - lo + 1
                ok = t + lo >= -min(pb, span - 1) and t + hi <= n - 1 + min(pa, span - 1)
            if not ok:
                continue
            sample = {"episode_index": e, "frame_index": t}
            for key, d in deltas.items():
                steps = [t + k for k in d]
                pad = [not 0 <= s < n for s in steps]
                vals = [0 if (p and zero) else 1000 * e + min(max(s, 0), n - 1) + 1 for s, p in zip(steps, pad)]
                sample[key] = vals
                sample[key + "_is_pad"] = pad
            sample["x_now"] = 1000 * e + min(max(t, 0), n - 1) + 1  # a key without offsets: the anchor, clamped
            out.append(sample)
    return out


deltas_st = st.dictionaries(st.sampled_from(["x", "v"]),
                            st.lists(st.integers(-6, 6), min_size=1, max_size=5), min_size=1)


@settings(max_examples=200, deadline=None)
@given(lengths=lengths_st, deltas=deltas_st, dp=st.booleans(), pb=st.integers(0, 8), pa=st.integers(0, 8),
       zero=st.booleans(), data=st.data())
def test_window_sampler_matches_the_rules(lengths, deltas, dp, pb, pa, zero, data):
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(lengths), max_size=len(lengths))))
    buf = _buffer(lengths)
    kw = dict(pad_before=pb, pad_after=pa) if dp else {}
    sampler = WindowSampler(buf, deltas, keys=list(deltas) + (["s"] if "x" in deltas else ["x"]),
                            pad_mode="zero" if zero else "edge", episode_mask=mask, **kw)
    want = _model(lengths, deltas, "diffusion_policy" if dp else "lerobot", pb, pa, mask, zero)
    assert len(sampler) == len(want)
    if not want:
        return
    idx = np.array(data.draw(st.lists(st.integers(-len(want), len(want) - 1), min_size=1, max_size=10)))
    got = sampler.sample_batch(idx)
    where = sampler.locate(idx)
    for j, i in enumerate(idx):
        w = want[i]
        assert (where["episode_index"][j], where["frame_index"][j]) == (w["episode_index"], w["frame_index"])
        assert where["index"][j] == sum(lengths[:w["episode_index"]]) + w["frame_index"]
        for key in deltas:
            vals = got[key][j] if key == "x" else got[key][j][:, 0]
            assert vals.tolist() == w[key], key
            assert got[key + "_is_pad"][j].tolist() == w[key + "_is_pad"]
        if "x" not in deltas:
            assert got["x"].shape == (len(idx),) and got["x"][j] == w["x_now"]
        else:
            e, t = w["episode_index"], w["frame_index"]
            assert got["s"][j] == f"e{e}s{min(max(t, 0), lengths[e] - 1)}"
    one = sampler[int(idx[0])]
    for key, v in one.items():
        np.testing.assert_array_equal(v, got[key][0])


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, n_obs=st.integers(1, 3), horizon=st.integers(1, 8), pb=st.integers(0, 8),
       pa=st.integers(0, 8), zero=st.booleans())
def test_diffusion_policy_rule_equals_sequence_sampler_first_slots(lengths, n_obs, horizon, pb, pa, zero):
    """diffusion_policy's windows with obs keys cut to n_obs (key_first_k) equal per-key offsets."""
    n_obs = min(n_obs, horizon)
    buf = _buffer(lengths)
    mode = "zero" if zero else "edge"
    seq = SequenceSampler(buf, horizon, pad_before=pb, pad_after=pa, key_first_k={"v": n_obs}, keys=["v", "x"],
                          pad_mode=mode)
    win = WindowSampler(buf, {"v": range(-n_obs + 1, 1), "x": range(-n_obs + 1, horizon - n_obs + 1)},
                        pad_before=pb, pad_after=pa, pad_mode=mode)
    assert len(win) == len(seq)
    if not len(seq):
        return
    idx = np.arange(len(seq))
    a, b = seq.sample_batch(idx), win.sample_batch(idx)
    np.testing.assert_array_equal(b["x"], a["x"])
    np.testing.assert_array_equal(b["x_is_pad"], a["_is_pad"])
    np.testing.assert_array_equal(b["v"], a["v"][:, :n_obs])
    assert b["v"].shape == (len(seq), n_obs, 2)


def test_zarr_backend_reads_only_the_requested_steps(tmp_path):
    buf = _buffer([9, 4, 12], "zarr", tmp_path)
    sampler = WindowSampler(buf, {"x": [-2, 0, 3], "v": [0]})
    got = sampler.sample_batch(np.arange(len(sampler)))
    want = _model([9, 4, 12], {"x": [-2, 0, 3], "v": [0]}, "lerobot")
    assert got["x"].tolist() == [w["x"] for w in want]
    assert got["v"].shape == (25, 1, 2) and got["v"].dtype == np.float32
    assert got["s"].tolist() == [f"e{w['episode_index']}s{w['frame_index']}" for w in want]


def test_delta_timestamps_follow_lerobots_rule(tmp_path):
    assert delta_timestamps_to_steps({"a": [-0.1, 0.0, 0.2]}, 10)["a"].tolist() == [-1, 0, 2]
    assert delta_timestamps_to_steps({"a": [1 / 30 + 5e-5]}, 30)["a"].tolist() == [1]
    with pytest.raises(ValueError, match=r"delta_timestamps\['a'\] holds 0.05 s"):
        delta_timestamps_to_steps({"a": [0.0, 0.05]}, 10)
    with pytest.raises(ValueError, match="non-empty"):
        delta_timestamps_to_steps({"a": []}, 10)
    buf = _buffer([5, 5])
    with pytest.raises(ValueError, match="no 'fps' attribute"):
        WindowSampler(buf, delta_timestamps={"x": [0.0]})
    buf.store.set_attrs("data", {"fps": 10.0})
    s = WindowSampler(buf, delta_timestamps={"x": [-0.1, 0.1]})
    assert s.delta_steps["x"].tolist() == [-1, 1] and s.fps == 10.0


@pytest.mark.parametrize("kwargs, error, match", [
    ({}, TypeError, "exactly one"),
    ({"delta_steps": {"x": []}}, ValueError, "non-empty"),
    ({"delta_steps": {"x": [0.5]}}, TypeError, "must hold ints"),
    ({"delta_steps": {"x": "01"}}, TypeError, "sequence of ints"),
    ({"delta_steps": {"nope": [0]}}, KeyError, "nope"),
    ({"delta_steps": {"x": [0]}, "keys": ["v"]}, KeyError, "not among the sampled keys"),
    ({"delta_steps": {"x": [0]}, "pad_before": 1}, TypeError, "go together"),
    ({"delta_steps": {"x": [0]}, "pad_mode": "wrap"}, ValueError, "pad_mode"),
])
def test_window_sampler_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        WindowSampler(_buffer([4, 4]), **kwargs)


def test_indices_and_offsets_too_large_for_int64_are_refused_not_wrapped():
    buf = _buffer([5, 3])
    sampler = WindowSampler(buf, {"x": [0]})
    for bad in (np.array([2**64 - 1], np.uint64), [2**63 + 2], [2**70]):
        with pytest.raises(IndexError, match="out of range for 8 windows"):
            sampler.sample_batch(bad)
    assert sampler.sample_batch(np.array([7], np.uint8))["x"].tolist() == [[1003]]
    for offsets in ([2**63 - 1], [2**64], np.array([2**63], np.uint64), [-(2**41)]):
        with pytest.raises(ValueError, match="beyond"):
            WindowSampler(buf, {"x": offsets})
    with pytest.raises(ValueError, match="beyond 2\\*\\*40 steps"):
        delta_timestamps_to_steps({"a": [1e18]}, 10)
    with pytest.raises(ValueError, match="finite"):
        delta_timestamps_to_steps({"a": [0.1]}, float("inf"))
    with pytest.raises(ValueError, match="non-empty list of seconds"):
        delta_timestamps_to_steps({"a": 0.0}, 10)


def test_window_index_arguments_are_checked():
    for first, error in ((0.5, TypeError), ("0", TypeError), (True, TypeError), (-(10**19), ValueError)):
        with pytest.raises(error, match="first"):
            WindowIndex([3], first, 1)
    wi = WindowIndex([3, 5], 0, 1)
    with pytest.raises(TypeError, match="episode must be an int"):
        wi.episode_windows(1.5)
    with pytest.raises(IndexError, match="episode 2 out of range"):
        wi.episode_windows(2)
    with pytest.raises(TypeError, match="must be a WindowIndex"):
        SequenceSampler(_buffer([3]), 2, window_index="abc")


def test_sample_batch_reads_into_the_arrays_it_is_given(tmp_path):
    buf = _buffer([5, 3, 4], backend="zarr", tmp_path=tmp_path)
    s = WindowSampler(buf, {"x": [-1, 0, 2]}, keys=["x", "v"])
    want = s.sample_batch([0, 7, 11])
    big = np.full((6, 3), -1, dtype=np.int64)  # a batch's first rows, as a mixture hands them
    got = s.sample_batch([0, 7, 11], out={"x": big[:3]})
    assert got["x"].base is big or got["x"] is big[:3] or np.shares_memory(got["x"], big)
    np.testing.assert_array_equal(big[:3], want["x"])
    assert (big[3:] == -1).all()
    np.testing.assert_array_equal(got["v"], want["v"])  # keys not given: arrays of the sampler's own
    with pytest.raises(ValueError, match=r"out\['x'\]"):
        s.sample_batch([0, 7], out={"x": big[:3]})


def test_a_pending_batch_whose_read_failed_raises_again_not_a_half_filled_batch(monkeypatch):
    """``PendingBatch.result()`` called again after a failed read raised that error again; it returned
    the batch's arrays as they were (the failed key's rows never written: uninitialised memory)."""
    from concurrent.futures import Future

    rb = _buffer([5, 7])
    ws = WindowSampler(rb, {"v": [-1, 0]}, keys=["x", "v"])
    reads = rb.read_rows_async

    def failing(key, rows, out=None, **kw):
        if key != "v":
            return reads(key, rows, out=out, **kw)
        done = Future()
        done.set_exception(OSError("chunk 3 of data/v does not decode"))
        return done

    monkeypatch.setattr(rb, "read_rows_async", failing)
    pending = ws.sample_batch_async(np.arange(len(ws)))
    for _ in range(2):
        with pytest.raises(OSError, match="chunk 3 of data/v"):
            pending.result()
