"""Statistics (``get_stats``, ``replaybuf stats``) and the quantile sketch behind them.

Expected values: NumPy on the same data read another way (zarr-python for the Push-T store), and
``np.quantile(..., method="lower"/"higher")`` for the documented bound of the sketch.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.stats.quantiles import ALPHA, QuantileSketch
from replaybuf_core.stats.summaries import QUANTILES

from shared_data import PUSHT  # noqa: E402

QS = (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0)


def _within(est, x, q):
    lo = np.quantile(x, q, axis=0, method="lower")
    hi = np.quantile(x, q, axis=0, method="higher")
    return np.all((est >= lo - ALPHA * np.abs(lo)) & (est <= hi + ALPHA * np.abs(hi)))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 400), cols=st.integers(1, 4),
       scale=st.sampled_from([1e-12, 1e-3, 1.0, 1e6, 1e30]), cuts=st.lists(st.integers(0, 400), max_size=4))
def test_sketch_quantiles_are_within_the_bound_and_merge_exactly(data, n, cols, scale, cuts):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, cols)) * scale
    x[rng.random((n, cols)) < 0.1] = 0.0
    whole = QuantileSketch(cols, exact=False)
    whole.add(x)
    parts = QuantileSketch(cols, exact=False)
    for a, b in zip([0] + sorted(cuts), sorted(cuts) + [n]):
        piece = QuantileSketch(cols, exact=False)
        piece.add(x[min(a, n):min(b, n)])
        parts.merge(piece)
    assert np.array_equal(parts.keys, whole.keys) and np.array_equal(parts.counts, whole.counts)
    assert whole.count().tolist() == [n] * cols
    for q in QS:
        assert _within(whole.quantile(q), x, q), q


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=200))
def test_exact_columns_read_back_order_statistics(values):
    x = np.array(values, dtype=np.int32)[:, None]
    s = QuantileSketch(1, exact=True)
    s.add(x)
    for q in QS:
        assert s.quantile(q)[0] == np.quantile(x[:, 0], q, method="lower")


def test_non_finite_values_are_not_counted():
    s = QuantileSketch(2, exact=False)
    s.add(np.array([[1.0, np.nan], [np.inf, 2.0], [3.0, 4.0]]))
    assert s.count().tolist() == [2, 2]
    assert s.quantile(1.0).tolist() == pytest.approx([3.0, 4.0], rel=ALPHA)


@pytest.mark.skipif(not PUSHT.is_dir(), reason="shared Push-T data not present")
def test_push_t_stats_against_numpy(tmp_path):
    g = zarr.open_group(str(PUSHT), mode="r")
    rb = ReplayBuffer.create_from_path(PUSHT)
    keys = ["state", "action", "keypoint", "n_contacts"]
    stats = rb.get_stats(keys)
    for k in keys:
        arr = np.asarray(g["data"][k][:], dtype=np.float64)
        x = arr.reshape(arr.shape[0], -1)
        d = stats[k]
        np.testing.assert_allclose(d["mean"].ravel(), x.mean(0), rtol=1e-12)
        np.testing.assert_allclose(d["std"].ravel(), x.std(0), rtol=1e-10)
        assert d["min"].ravel().tolist() == x.min(0).tolist() and d["max"].ravel().tolist() == x.max(0).tolist()
        assert int(d["count"][0]) == len(x)
        for name, q in QUANTILES.items():
            assert _within(d[name].ravel(), x, q), (k, name)


def test_frames_are_exact_per_channel_and_the_command_prints_them(tmp_path, capsys):
    rng = np.random.default_rng(3)
    rb = ReplayBuffer.create_empty("zarr", str(tmp_path / "f.zarr"))
    frames = []
    for n in (5, 9):
        f = rng.integers(0, 256, (n, 6, 7, 3), dtype=np.uint8)
        frames.append(f)
        rb.add_episode({"img": f, "label": np.array(["a"] * n, dtype=object), "flag": f[:, 0, 0, 0] > 128})
    rb.close()
    px = np.concatenate(frames).reshape(-1, 3).astype(np.float64) / 255
    stats = ReplayBuffer.create_from_path(tmp_path / "f.zarr").get_stats()
    assert set(stats) == {"img", "flag"}  # strings left out
    d = stats["img"]
    for name, q in QUANTILES.items():
        assert d[name].ravel().tolist() == np.quantile(px, q, axis=0, method="lower").tolist(), name
    np.testing.assert_allclose(d["mean"].ravel(), px.mean(0), rtol=1e-12)
    assert d["min"].shape == (3, 1, 1) and d["count"].tolist() == [14]
    assert main(["stats", str(tmp_path / "f.zarr"), "--json", "--key", "img"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert list(got) == ["img"] and got["img"]["q50"] == d["q50"].tolist()
    with pytest.raises(KeyError, match="no data key 'nope'"):
        ReplayBuffer.create_from_path(tmp_path / "f.zarr").get_stats(["nope"])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 37), channels=st.integers(1, 4), smooth=st.booleans(), seed=st.integers(0, 2**16))
def test_channel_histograms_count_every_value_of_every_channel(n, channels, smooth, seed):
    from replaybuf_core.stats.kernels import channel_histograms

    rng = np.random.default_rng(seed)
    frames = (np.repeat(rng.integers(0, 256, (n, 1, 1, channels)), 5, axis=1) if smooth
              else rng.integers(0, 256, (n, 5, channels))).astype(np.uint8)  # runs of equal values, or noise
    hist = np.full((channels, 256), 7, np.int64)  # counts are added to what is there
    channel_histograms(frames, hist)
    want = 7 + np.stack([np.bincount(frames[..., c].ravel(), minlength=256) for c in range(channels)])
    np.testing.assert_array_equal(hist, want)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_squared_error_sum_equals_numpys_in_float64(data):
    """The import's PSNR numerator (a compiled int64 pass for uint8 frames) against NumPy's float64."""
    from replaybuf_core.stats.kernels import squared_error_sum

    shape = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=4).map(tuple))
    dtype = data.draw(st.sampled_from([np.uint8, np.float32]))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, shape).astype(dtype)
    b = rng.integers(0, 256, shape).astype(dtype)
    if data.draw(st.booleans()):
        a, b = a.T, b.T  # not contiguous
    want = float(np.sum((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    assert squared_error_sum(a, b) == want
    with pytest.raises(ValueError, match="differ"):
        squared_error_sum(a, b.reshape(-1)[:-1] if b.size > 1 else np.zeros(2, dtype))
