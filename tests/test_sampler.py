"""Tests for replaybuf_core.sampling.sampler (windows, padding, masks, batched reads)."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import (
    IS_PAD_KEY,
    SequenceSampler,
    create_indices,
    downsample_mask,
    get_val_mask,
)
from replaybuf_core.sampling.sampler_indices import _create_indices_numba, _create_indices_numpy


# --------------------------------------------------------------------------- buffers
class _MinimalArray:
    """Only what the sampler may rely on: .shape, .dtype, arr[a:b] -> ndarray."""

    def __init__(self, data: np.ndarray):
        self._data = data
        self.shape = data.shape
        self.dtype = data.dtype

    def __getitem__(self, sl):
        assert isinstance(sl, slice) and sl.step is None, sl
        return self._data[sl].copy()


class FakeBuffer:
    """Dict-of-ndarrays stand-in with the ReplayBuffer members the sampler uses."""

    def __init__(self, episodes: list[dict[str, np.ndarray]]):
        keys = list(episodes[0].keys()) if episodes else []
        self._data = {k: np.concatenate([ep[k] for ep in episodes]) for k in keys}
        self.episode_ends = np.cumsum([len(ep[keys[0]]) for ep in episodes]).astype(np.int64)
        self.read_ranges_calls: list[tuple[str, int]] = []

    @property
    def n_episodes(self):
        return len(self.episode_ends)

    @property
    def n_steps(self):
        return int(self.episode_ends[-1]) if len(self.episode_ends) else 0

    @property
    def episode_lengths(self):
        return np.diff(self.episode_ends, prepend=0)

    def keys(self):
        return list(self._data.keys())

    def __getitem__(self, key):
        return _MinimalArray(self._data[key])

    def read_ranges(self, key, starts, stops):
        self.read_ranges_calls.append((key, len(starts)))
        return [self._data[key][a:b].copy() for a, b in zip(starts, stops)]


def make_episode(rng: np.random.Generator, length: int, ep_id: int) -> dict[str, np.ndarray]:
    base = ep_id * 1000 + np.arange(length)
    return {
        "obs": (base[:, None] + rng.standard_normal((length, 3))).astype(np.float32),
        "action": (base + 1).astype(np.int64),
        "done": (np.arange(length) % 2 == 0),
        "lang": np.array([f"ep{ep_id}-step{j}" for j in range(length)], dtype=object),
        "img": rng.integers(0, 255, size=(length, 2, 2, 3), dtype=np.uint8),
    }


def make_buffer(backend: str, lengths, seed: int = 0):
    rng = np.random.default_rng(seed)
    episodes = [make_episode(rng, n, i) for i, n in enumerate(lengths)]
    if backend == "fake":
        return FakeBuffer(episodes)
    if backend == "numpy":
        buf = ReplayBuffer.create_empty_numpy()
    elif backend == "zarr":
        buf = ReplayBuffer.create_empty_zarr()
    else:
        raise ValueError(backend)
    for ep in episodes:
        buf.add_episode(ep)
    return buf


BACKENDS = ["fake", "numpy", "zarr"]
LENGTHS = [5, 1, 3, 8, 2]


# ------------------------------------------------------------------ brute force refs
def brute_windows(lengths, S, mask, pb, pa, skip):
    """Enumerate windows straight from the definition, independent of the kernel."""
    rows = []
    start = 0
    for i, L in enumerate(lengths):
        if mask[i] and L > 0:
            eps = []
            for t in range(-S - pb - 1, L + S + pa + 1):
                front = max(0, -t)
                back = max(0, t + S - L)
                real = S - front - back
                if front <= pb and back <= pa and real >= 1:
                    eps.append([start + max(t, 0), start + min(t + S, L), front, S - back])
            rows.extend(eps[skip:])
        start += L
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def fill_for(dtype, unread: bool):
    if dtype.kind in "fc" and unread:
        return np.nan
    if dtype.kind in "OUT":
        return ""
    if dtype.kind == "b":
        return False
    return 0


def brute_window(buffer_data, episode_ends, row, S, pad_mode, key_first_k):
    """Window from the definition: slot j holds episode step t + j, clamped (edge) or fill."""
    bs, be, ss, se = (int(x) for x in row)
    ep = int(np.searchsorted(episode_ends, bs, side="right"))
    ep_start = int(episode_ends[ep - 1]) if ep > 0 else 0
    L = int(episode_ends[ep]) - ep_start
    t = bs - ep_start - ss
    out = {}
    for key, data in buffer_data.items():
        vals = []
        for j in range(S):
            step = t + j
            if j >= key_first_k.get(key, S):
                vals.append(np.full(data.shape[1:], fill_for(data.dtype, True), dtype=data.dtype))
            elif 0 <= step < L or pad_mode == "edge":
                vals.append(data[ep_start + min(max(step, 0), L - 1)])
            else:
                vals.append(np.full(data.shape[1:], fill_for(data.dtype, False), dtype=data.dtype))
        out[key] = np.stack(vals).astype(data.dtype)
    out[IS_PAD_KEY] = np.array([not (0 <= t + j < L) for j in range(S)])
    return out


def all_data(buffer):
    """Every key's stored rows; strings as ``object`` arrays of ``str`` (what the sampler returns on
    every backend, also where the native array is zarr's ``StringDType``)."""
    out = {}
    for k in buffer.keys():
        a = np.asarray(buffer[k][0: buffer[k].shape[0]])
        out[k] = a.astype(object) if a.dtype.kind in "TU" else a
    return out


def assert_window_equal(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].shape == want[k].shape, k
        if want[k].dtype.kind in "fc":
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)  # NaN == NaN here
        else:
            assert np.array_equal(got[k], want[k]), (k, got[k], want[k])


# ----------------------------------------------------------------- create_indices
def test_worked_example_from_docstring():
    idx = create_indices(np.array([3]), 4, np.array([True]), pad_before=1, pad_after=1)
    assert idx.tolist() == [[0, 3, 1, 4], [0, 3, 0, 3]]
    assert idx.dtype == np.int64
    idx = create_indices(np.array([3]), 4, np.array([True]), 1, 1, skip_initial=1)
    assert idx.tolist() == [[0, 3, 0, 3]]
    assert create_indices(np.array([3]), 4, np.array([True])).shape == (0, 4)


def test_matches_diffusion_policy_table_example():
    # Two episodes [0, 5) and [5, 7), S=3, pad_before=2, pad_after=1, worked out by hand
    # with diffusion_policy's formulas (start t from -pad_before to L - S + pad_after).
    idx = create_indices(np.array([5, 7]), 3, np.array([True, True]), 2, 1)
    assert idx.tolist() == [
        [0, 1, 2, 3], [0, 2, 1, 3], [0, 3, 0, 3], [1, 4, 0, 3], [2, 5, 0, 3], [3, 5, 0, 2],
        [5, 6, 2, 3], [5, 7, 1, 3], [5, 7, 0, 2],
    ]


def test_empty_and_all_masked():
    assert create_indices(np.zeros(0, np.int64), 3, np.zeros(0, bool)).shape == (0, 4)
    assert create_indices(np.array([4, 9]), 2, np.array([False, False])).shape == (0, 4)
    # zero-length episode yields nothing, neighbours unaffected
    got = create_indices(np.array([2, 2, 4]), 2, None)
    assert got.tolist() == [[0, 2, 0, 2], [2, 4, 0, 2]]


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=0, max_size=8),
    S=st.integers(1, 8),
    pb=st.integers(0, 10),
    pa=st.integers(0, 10),
    skip=st.integers(0, 6),
    data=st.data(),
)
def test_create_indices_matches_brute_force(lengths, S, pb, pa, skip, data):
    mask = data.draw(st.lists(st.booleans(), min_size=len(lengths), max_size=len(lengths)))
    ends = np.cumsum(np.array(lengths, dtype=np.int64))
    mask_arr = np.array(mask, dtype=bool)
    got = create_indices(ends, S, mask_arr, pad_before=pb, pad_after=pa, skip_initial=skip)
    want = brute_windows(lengths, S, mask, pb, pa, skip)
    assert got.dtype == np.int64 and got.shape == want.shape
    assert np.array_equal(got, want)
    # the vectorised form agrees with the kernel
    pbc, pac = min(pb, S - 1), min(pa, S - 1)
    assert np.array_equal(_create_indices_numpy(ends, mask_arr, S, pbc, pac, skip), got)
    # invariants
    if len(got):
        assert ((got[:, 1] - got[:, 0]) == (got[:, 3] - got[:, 2])).all()
        assert (got[:, 1] > got[:, 0]).all()
        assert (got[:, 2] <= pbc).all() and (S - got[:, 3] <= pac).all()


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(sequence_length=0), ValueError, "sequence_length must be >= 1"),
        (dict(sequence_length=-3), ValueError, "sequence_length must be >= 1"),
        (dict(sequence_length=2.0), TypeError, "sequence_length must be an int"),
        (dict(sequence_length=True), TypeError, "sequence_length must be an int"),
        (dict(pad_before=-1), ValueError, "pad_before must be >= 0"),
        (dict(pad_after=-1), ValueError, "pad_after must be >= 0"),
        (dict(pad_after=None), TypeError, "pad_after must be an int"),
        (dict(skip_initial=-2), ValueError, "skip_initial must be >= 0"),
        (dict(episode_mask=np.ones(3, bool)), ValueError, r"episode_mask must have shape \(n_episodes,\)"),
        (dict(episode_mask=np.ones(2, np.int64)), TypeError, "episode_mask must have dtype bool"),
        (dict(episode_mask=[1, 0]), TypeError, "episode_mask must have dtype bool"),
        (dict(episode_ends=np.array([[3, 5]])), ValueError, "episode_ends must be 1-D"),
        (dict(episode_ends=np.array([5, 3])), ValueError, "non-decreasing"),
        (dict(episode_ends=np.array([-1, 3])), ValueError, "episode_ends must be >= 0"),
        (dict(episode_ends=np.array([3.0, 5.0])), TypeError, "integer dtype"),
    ],
)
def test_create_indices_validation(kwargs, exc, match):
    args = dict(episode_ends=np.array([3, 5]), sequence_length=2, episode_mask=np.ones(2, bool))
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        create_indices(**args)


def test_pads_clamped_like_diffusion_policy():
    a = create_indices(np.array([4]), 3, None, pad_before=50, pad_after=50)
    b = create_indices(np.array([4]), 3, None, pad_before=2, pad_after=2)
    assert np.array_equal(a, b)


# ---------------------------------------------------------------- SequenceSampler
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pad_mode", ["edge", "zero"])
@pytest.mark.parametrize("first_k", [None, {"obs": 2, "lang": 1, "done": 3, "action": 0}])
@pytest.mark.parametrize("S, pb, pa, skip", [(4, 1, 1, 0), (3, 2, 2, 1), (1, 0, 0, 0), (6, 5, 3, 2)])
def test_every_window_matches_reference(backend, pad_mode, first_k, S, pb, pa, skip):
    buf = make_buffer(backend, LENGTHS)
    sampler = SequenceSampler(
        buf, S, pad_before=pb, pad_after=pa, key_first_k=first_k, skip_initial=skip, pad_mode=pad_mode
    )
    want_rows = brute_windows(LENGTHS, S, [True] * len(LENGTHS), pb, pa, skip)
    assert np.array_equal(sampler.indices, want_rows)
    assert len(sampler) == len(want_rows) > 0
    data = all_data(buf)
    ends = np.asarray(buf.episode_ends)
    windows = []
    for i in range(len(sampler)):
        got = sampler[i]
        want = brute_window(data, ends, want_rows[i], S, pad_mode, first_k or {})
        assert_window_equal(got, want)
        assert_window_equal(sampler[i - len(sampler)], want)  # negative index
        windows.append(want)
    # batched path, shuffled with repeats
    order = np.random.default_rng(1).integers(-len(sampler), len(sampler), size=3 * len(sampler))
    batch = sampler.sample_batch(order)
    for key in list(buf.keys()) + [IS_PAD_KEY]:
        stacked = np.stack([windows[i][key] for i in order])
        assert batch[key].dtype == stacked.dtype
        if stacked.dtype.kind == "f":
            np.testing.assert_array_equal(batch[key], stacked)
        else:
            assert np.array_equal(batch[key], stacked), key


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=5),
    S=st.integers(1, 6),
    pb=st.integers(0, 6),
    pa=st.integers(0, 6),
    skip=st.integers(0, 3),
    pad_mode=st.sampled_from(["edge", "zero"]),
    k=st.one_of(st.none(), st.integers(0, 7)),
)
def test_random_configs_match_reference(lengths, S, pb, pa, skip, pad_mode, k):
    buf = make_buffer("fake", lengths)
    first_k = None if k is None else {"obs": k, "lang": k, "done": k}
    sampler = SequenceSampler(buf, S, pb, pa, key_first_k=first_k, skip_initial=skip, pad_mode=pad_mode)
    data, ends = all_data(buf), np.asarray(buf.episode_ends)
    windows = [brute_window(data, ends, row, S, pad_mode, first_k or {}) for row in sampler.indices]
    for i, want in enumerate(windows):
        assert_window_equal(sampler[i], want)
    batch = sampler.sample_batch(np.arange(len(sampler)))
    assert batch[IS_PAD_KEY].shape == (len(sampler), S)
    for key in batch:
        if windows:
            np.testing.assert_array_equal(batch[key], np.stack([w[key] for w in windows]))
        elif key != IS_PAD_KEY:
            assert batch[key].shape == (0, S) + buf[key].shape[1:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_batch_equals_stacked_getitem(backend):
    buf = make_buffer(backend, [7, 2, 9, 1, 4])
    sampler = SequenceSampler(buf, 5, pad_before=2, pad_after=4, pad_mode="zero", key_first_k={"img": 3})
    idx = np.arange(len(sampler))[::-1]
    batch = sampler.sample_batch(idx)
    for key in batch:
        stacked = np.stack([sampler[int(i)][key] for i in idx])
        assert batch[key].shape == (len(idx), 5) + buf[key].shape[1:] if key != IS_PAD_KEY else (len(idx), 5)
        np.testing.assert_array_equal(batch[key], stacked)
    assert sampler.sample_batch([]) [IS_PAD_KEY].shape == (0, 5)


def test_sample_batch_reads_once_per_key():
    buf = make_buffer("fake", LENGTHS)
    sampler = SequenceSampler(buf, 3, pad_before=1, pad_after=1, keys=["obs", "lang"])
    buf.read_ranges_calls.clear()
    sampler.sample_batch(np.arange(len(sampler)))
    assert buf.read_ranges_calls == [("obs", len(sampler)), ("lang", len(sampler))]


def test_key_first_k_reads_only_needed_rows():
    buf = make_buffer("fake", [10])
    sampler = SequenceSampler(buf, 6, pad_before=2, key_first_k={"obs": 2}, keys=["obs"])
    reads = []
    orig = buf.read_ranges

    def spy(key, starts, stops):
        reads.append((np.asarray(stops) - np.asarray(starts)).tolist())
        return orig(key, starts, stops)

    buf.read_ranges = spy
    b = sampler.sample_batch([0, 1, 2, 3])
    # starts t=-2,-1,0,1: rows needed = 1 (edge: first real step), 1, 2, 2
    assert reads == [[1, 1, 2, 2]]
    assert np.isnan(b["obs"][:, 2:]).all() and not np.isnan(b["obs"][:, :2]).any()
    assert b[IS_PAD_KEY][0].tolist() == [True, True, False, False, False, False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_mask_excludes_episodes(backend):
    buf = make_buffer(backend, LENGTHS)
    mask = np.array([True, False, True, False, True])
    sampler = SequenceSampler(buf, 2, pad_before=1, pad_after=1, episode_mask=mask)
    ends = np.asarray(buf.episode_ends)
    episode_of = lambda step: int(np.searchsorted(ends, step, side="right"))  # noqa: E731
    seen = {episode_of(r[0]) for r in sampler.indices}
    assert seen == {0, 2, 4}
    lang = sampler.sample_batch(np.arange(len(sampler)))["lang"]
    assert not any(s.startswith(("ep1-", "ep3-")) for s in lang.ravel())
    # and matches the brute-force table
    assert np.array_equal(sampler.indices, brute_windows(LENGTHS, 2, mask, 1, 1, 0))


def test_getitem_index_errors():
    sampler = SequenceSampler(make_buffer("fake", LENGTHS), 2)
    n = len(sampler)
    with pytest.raises(IndexError, match=rf"index {n} out of range .*length {n}"):
        sampler[n]
    with pytest.raises(IndexError, match=rf"index {-n - 1} out of range .*length {n}"):
        sampler[-n - 1]
    with pytest.raises(IndexError, match="out of range"):
        sampler.sample_batch([0, n])
    with pytest.raises(TypeError):
        sampler[1.0]
    with pytest.raises(TypeError):
        sampler.sample_batch([0.5])
    with pytest.raises(TypeError):
        sampler.sample_batch(np.ones(2, bool))
    with pytest.raises(ValueError, match="1-D"):
        sampler.sample_batch(np.zeros((2, 2), np.int64))
    assert sampler.sample_batch(-1)[IS_PAD_KEY].shape == (1, 2)  # a scalar is a batch of one
    empty = SequenceSampler(make_buffer("fake", [1, 1]), 3)
    assert len(empty) == 0
    with pytest.raises(IndexError, match="length 0"):
        empty[0]


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(pad_mode="reflect"), ValueError, "pad_mode must be one of"),
        (dict(keys=["obs", "nope"]), KeyError, "nope"),
        (dict(keys="obs"), TypeError, "not a str"),
        (dict(key_first_k={"img": 1}, keys=["obs"]), KeyError, "img"),
        (dict(key_first_k={"obs": -1}), ValueError, r"key_first_k\['obs'\] must be >= 0"),
        (dict(key_first_k={"obs": 1.5}), TypeError, "must be an int"),
        (dict(sequence_length=0), ValueError, "sequence_length must be >= 1"),
        (dict(pad_before=-1), ValueError, "pad_before must be >= 0"),
        (dict(episode_mask=np.ones(2, bool)), ValueError, "episode_mask must have shape"),
        (dict(episode_mask=np.ones(5, np.int8)), TypeError, "dtype bool"),
    ],
)
def test_sampler_validation(kwargs, exc, match):
    args = dict(sequence_length=2)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        SequenceSampler(make_buffer("fake", LENGTHS), **args)


def test_string_and_bool_padding_values():
    buf = make_buffer("fake", [2])
    s = SequenceSampler(buf, 4, pad_before=1, pad_after=3, pad_mode="zero", keys=["lang", "done", "action"])
    w = s[0]  # t=-1: [pad, step0, step1, pad]
    assert w["lang"].tolist() == ["", "ep0-step0", "ep0-step1", ""]
    assert w["done"].tolist() == [False, True, False, False]
    assert w["action"].tolist() == [0, 1, 2, 0]
    e = SequenceSampler(buf, 4, pad_before=1, pad_after=3, keys=["lang"])[0]
    assert e["lang"].tolist() == ["ep0-step0", "ep0-step0", "ep0-step1", "ep0-step1"]


# ------------------------------------------------------------------------ masks
@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 60), ratio=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_get_val_mask_properties(n, ratio, seed):
    m = get_val_mask(n, ratio, seed)
    assert m.dtype == np.bool_ and m.shape == (n,)
    if n >= 1:
        assert (~m).sum() >= 1  # at least one train episode
    if ratio > 0 and n >= 2:
        assert m.sum() >= 1
        assert m.sum() == min(max(1, round(n * ratio)), n - 1)
    if ratio == 0:
        assert not m.any()
    assert np.array_equal(m, get_val_mask(n, ratio, seed))  # deterministic


def test_get_val_mask_validation():
    with pytest.raises(ValueError, match="val_ratio"):
        get_val_mask(10, 1.5)
    with pytest.raises(ValueError, match="val_ratio"):
        get_val_mask(10, -0.1)
    with pytest.raises(ValueError, match="val_ratio"):
        get_val_mask(10, float("nan"))
    with pytest.raises(ValueError, match="n_episodes must be >= 0"):
        get_val_mask(-1, 0.1)
    with pytest.raises(TypeError, match="n_episodes must be an int"):
        get_val_mask(3.0, 0.1)


@settings(max_examples=200, deadline=None)
@given(bits=st.lists(st.booleans(), max_size=50), max_n=st.integers(0, 60), seed=st.integers(0, 2**32 - 1))
def test_downsample_mask_properties(bits, max_n, seed):
    mask = np.array(bits, dtype=bool)
    out = downsample_mask(mask, max_n, seed)
    assert out.dtype == np.bool_ and out.shape == mask.shape
    assert out.sum() == min(mask.sum(), max_n)
    assert not (out & ~mask).any()  # subset
    assert np.array_equal(out, downsample_mask(mask, max_n, seed))
    assert out is not mask
    assert np.array_equal(downsample_mask(mask, None, seed), mask)


def test_downsample_mask_is_random_and_validated():
    mask = np.ones(100, bool)
    a, b = downsample_mask(mask, 10, 0), downsample_mask(mask, 10, 1)
    assert not np.array_equal(a, b)
    with pytest.raises(TypeError, match="dtype bool"):
        downsample_mask(np.ones(3, np.int64), 1)
    with pytest.raises(ValueError, match="1-D"):
        downsample_mask(np.ones((2, 2), bool), 1)
    with pytest.raises(ValueError, match="max_n must be >= 0"):
        downsample_mask(mask, -1)


# ------------------------------------------------------------------ measurement
def test_numba_and_numpy_indices_agree_on_100k_episodes():
    """The shipped numba kernel and the vectorised NumPy form give the same table at scale
    (their timing is in ``python -m benchmarks``, index section)."""
    rng = np.random.default_rng(0)
    ends = np.cumsum(rng.integers(1, 200, size=100_000))
    mask = rng.random(ends.size) < 0.9
    a = _create_indices_numba(ends, mask, 16, 1, 7, 2)
    b = _create_indices_numpy(ends, mask, 16, 1, 7, 2)
    assert a.shape[0] > 1_000_000
    np.testing.assert_array_equal(a, b)


def test_sampler_imports_neither_zarr_nor_torch():
    import subprocess
    import sys

    code = (
        "import sys, replaybuf_core.sampling.sampler, replaybuf_core.sampling.sampler_indices; "
        "bad = [m for m in ('zarr', 'torch') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_diffusion_policys_keyword_call_runs_unchanged():
    """diffusion_policy's datasets build their sampler with keywords (``replay_buffer=``, ...); the
    windows are the episode's steps sliced by hand (no padding in the middle of an episode)."""
    rb = ReplayBuffer.create_empty_numpy()
    for n in (12, 9):
        rb.add_episode({"obs": np.arange(100 * n, 100 * n + n, dtype=np.float32)[:, None],
                        "action": np.arange(n, dtype=np.int64)[:, None]})
    mask = np.array([True, True])
    sampler = SequenceSampler(replay_buffer=rb, sequence_length=4, pad_before=1, pad_after=3,
                              keys=["obs", "action"], key_first_k={"obs": 2}, episode_mask=mask)
    assert len(sampler) == (12 - 4 + 1 + 1 + 3) + (9 - 4 + 1 + 1 + 3)
    window = sampler.sample_sequence(3)  # episode 0, start 2: steps 2..5, no padding
    np.testing.assert_array_equal(window["action"][:, 0], [2, 3, 4, 5])
    np.testing.assert_array_equal(window["obs"][:2, 0], [1202, 1203])
    assert np.isnan(window["obs"][2:]).all()  # key_first_k: the slots past k
