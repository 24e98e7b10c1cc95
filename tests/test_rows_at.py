"""Rows read into the places ``at=`` names (``read_rows``/``read_rows_async``, ``WindowSampler``):
a mixture reads each store's share of a batch straight into the batch's rows (issue 49).

Expected values come from the data as written (a plain NumPy fancy index of it), never from the
reader under test; rows of ``out`` that ``at`` does not name must keep what they held.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.keys import TMP_KEY
from replaybuf_core.sampling.window_sampler import WindowSampler

SENTINEL = -7


def _buffer(backend: str, path, x: np.ndarray, y: np.ndarray, lengths: list[int], chunk: int) -> ReplayBuffer:
    rb = ReplayBuffer.create_empty(backend) if backend == "numpy" else ReplayBuffer.create_empty("zarr", str(path))
    start = 0
    for n in lengths:
        rb.add_episode({"x": x[start:start + n], "y": y[start:start + n]},
                       chunks={"x": (chunk,) + x.shape[1:], "y": (chunk,) + y.shape[1:]})
        start += n
    return rb


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), backend=st.sampled_from(["numpy", "zarr"]), chunk=st.integers(1, 9),
       lengths=st.lists(st.integers(1, 15), min_size=1, max_size=4))
def test_rows_land_at_the_places_named_and_nowhere_else(tmp_path_factory, data, backend, chunk, lengths):
    n_steps = sum(lengths)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.integers(0, 100, (n_steps, 3)).astype("f4")
    y = rng.integers(0, 255, (n_steps, 4, 5, 3)).astype("u1")
    rb = _buffer(backend, tmp_path_factory.mktemp("at") / "s.zarr", x, y, lengths, chunk)
    n = data.draw(st.integers(1, 10))
    width = data.draw(st.sampled_from([None, 1, 3]))
    rows = rng.integers(0, n_steps, (n,) if width is None else (n, width))
    m = n + data.draw(st.integers(0, 6))
    at = rng.permutation(m)[:n]
    for key, source in (("x", x), ("y", y)):
        fill = SENTINEL if source.dtype.kind == "f" else 251
        out = np.full((m,) + rows.shape[1:] + source.shape[1:], fill, dtype=source.dtype)
        if data.draw(st.booleans()):
            got = rb.read_rows(key, rows, out=out, at=at)
        else:
            got = rb.read_rows_async(key, rows, out=out, at=at).result()
        assert got is out
        np.testing.assert_array_equal(out[at], source[rows])
        untouched = np.setdiff1d(np.arange(m), at)
        assert (out[untouched] == fill).all()


def test_an_older_version_reads_rows_at_places_too(tmp_path):
    """A version view has no ``rows_at``: the rows go through a temporary, to the same places."""
    x = np.arange(40, dtype="f4").reshape(20, 2)
    path = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode({"x": x[:12]}, chunks={"x": (4, 2)})
        rb.add_episode({"x": x[12:]}, chunks={"x": (4, 2)})
        rb.delete_episodes([0])
    with ReplayBuffer(str(path), version=0) as old:
        assert "rows_at" not in old.store.capabilities
        rows = np.array([19, 0, 7])
        out = np.full((5, 2), SENTINEL, "f4")
        old.read_rows("x", rows, out=out, at=[4, 0, 2])
        np.testing.assert_array_equal(out[[4, 0, 2]], x[rows])
        np.testing.assert_array_equal(out[[1, 3]], SENTINEL)


@pytest.mark.parametrize("backend", ["numpy", "zarr"])
def test_bad_places_are_refused_before_anything_is_read(tmp_path, backend):
    x = np.arange(20, dtype="f4").reshape(10, 2)
    rb = _buffer(backend, tmp_path / "s.zarr", x, np.zeros((10, 1, 1, 3), "u1"), [10], 4)
    out = np.full((4, 2), SENTINEL, "f4")
    cases = [
        ({"at": [0, 0]}, ValueError, r"names a row of out twice \(reading 'x'\)"),
        ({"at": [0]}, ValueError, r"at must be ints of shape \(2,\).*reading 'x'"),
        ({"at": [0.0, 1.0]}, ValueError, r"at must be ints"),
        ({"at": [0, 4]}, IndexError, r"row 4 of out, which has 4 rows \(reading 'x'\)"),
        ({"at": [0, -1]}, IndexError, r"row -1 of out"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            rb.read_rows("x", [1, 2], out=out, **kwargs)
    with pytest.raises(ValueError, match=r"at= needs out= \(reading 'x'\)"):
        rb.read_rows("x", [1, 2], at=[0, 1])
    with pytest.raises(ValueError, match=r"out has shape \(4, 3\), expected \(m,\) \+ \(2,\)"):
        rb.read_rows("x", [1, 2], out=np.zeros((4, 3), "f4"), at=[0, 1])
    with pytest.raises(KeyError, match="nope"):
        rb.read_rows("nope", [1, 2], out=out, at=[0, 1])
    with pytest.raises(ValueError, match=r"at= needs rows with a first axis.*rows is one int"):
        rb.read_rows("x", 3, out=out, at=[0])
    assert rb.read_rows("x", [], out=out, at=[]) is out  # nothing to read, nothing written
    with pytest.raises(IndexError, match="row 10"):
        rb.read_rows("x", [1, 10], out=out, at=[0, 1])
    assert (out == SENTINEL).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_samplers_batch_read_at_places_equals_the_batch_it_returns(tmp_path_factory, data):
    lengths = data.draw(st.lists(st.integers(2, 12), min_size=1, max_size=4))
    n_steps = sum(lengths)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.integers(0, 100, (n_steps, 2)).astype("f4")
    y = rng.integers(0, 255, (n_steps, 4, 5, 3)).astype("u1")
    rb = _buffer(data.draw(st.sampled_from(["numpy", "zarr"])), tmp_path_factory.mktemp("w") / "s.zarr", x, y,
                 lengths, data.draw(st.integers(1, 6)))
    sampler = WindowSampler(rb, {"x": [-1, 0, 2], "y": [0]}, keys=["x", "y"], dtypes="stored")
    b = data.draw(st.integers(1, 6))
    idx = rng.integers(0, len(sampler), b)
    m = b + data.draw(st.integers(0, 4))
    at = rng.permutation(m)[:b]
    want = {k: v.copy() for k, v in sampler.sample_batch(idx).items()}
    out = {"y": np.full((m, 1, 4, 5, 3), 3, "u1")}  # x is not given: it comes back as a (B, ...) array
    got = sampler.sample_batch(idx, out=out, at=at)
    assert got["y"] is out["y"]
    np.testing.assert_array_equal(out["y"][at], want["y"])
    np.testing.assert_array_equal(np.delete(out["y"], at, axis=0), 3)
    for key in ("x", "x_is_pad", "y_is_pad"):
        np.testing.assert_array_equal(got[key], want[key])
    with pytest.raises(ValueError, match="distinct ints, one row of out for each sample"):
        sampler.sample_batch(idx, out=out, at=np.zeros(b + 1, int))


def test_a_read_only_buffer_mid_swap_samples_its_committed_array(tmp_path):
    """Opened read-only while a swap was cut short (``data/x`` only under its backup name), the
    sampler's asynchronous batch path reads the backup — as the synchronous path always did."""
    x = np.arange(30, dtype="f4").reshape(15, 2)
    path = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode({"x": x[:9], "y": x[:9, :1]}, chunks={"x": (4, 2), "y": (4, 1)})
        rb.add_episode({"x": x[9:], "y": x[9:, :1]}, chunks={"x": (4, 2), "y": (4, 1)})
    shutil.move(path / "data" / "x", path / "data" / f"{TMP_KEY}_old.x")
    with pytest.warns(RuntimeWarning, match="data/x: an interrupted rechunk had moved it aside"):
        rb = ReplayBuffer(str(path), read_only=True)
    with rb:
        sampler = WindowSampler(rb, {"x": [0, 1]}, keys=["x"], dtypes="stored")
        idx = np.arange(len(sampler))
        got = sampler.sample_batch_async(idx).result()["x"]
        where = sampler.locate(idx)["index"]
        want = x[np.minimum(where[:, None] + [0, 1], np.repeat(np.array([8, 14]), [9, 6])[where][:, None])]
        np.testing.assert_array_equal(got, want)
    assert zarr.open_group(str(path), mode="r")["data"].get("x") is None  # nothing was repaired by the reader


def test_a_batch_refused_for_one_key_starts_no_read_of_another(tmp_path, monkeypatch):
    """Every key's ``out``/``at`` is checked before any read starts: a refusal of a small key must
    not leave a camera read (started first, decoding on the pool) writing into the caller's array
    after the error (a break-it trial saw all 64 frames land a moment after the IndexError)."""
    import time

    from replaybuf_zarr import chunk_reader, row_gather

    monkeypatch.setattr(chunk_reader, "PARALLEL_MIN", 1)
    monkeypatch.setattr(row_gather, "_CPUS", 2)
    t = 64
    rb = ReplayBuffer.create_empty("zarr", str(tmp_path / "s.zarr"))
    rb.add_episode({"cam": np.random.default_rng(0).integers(1, 255, (t, 120, 160, 3), dtype=np.uint8),
                    "x": np.arange(t * 2, dtype="f4").reshape(t, 2)}, frames={"cam": "exact"})
    sampler = WindowSampler(rb, {"cam": [0], "x": [0]}, keys=["x", "cam"], dtypes="stored")
    short = {"cam": np.zeros((t, 1, 120, 160, 3), np.uint8), "x": np.zeros((t - 1, 1, 2), "f4")}
    wrong = {"cam": np.zeros((t, 1, 120, 160, 3), np.uint8), "x": np.zeros((t, 1, 3), "f4")}
    for out, error in ((short, IndexError), (wrong, ValueError)):
        with pytest.raises(error, match="'x'"):
            sampler.sample_batch(np.arange(t), out=out, at=np.arange(t))
        time.sleep(0.3)
        assert not out["cam"].any(), "a frame was written after the batch was refused"
