"""Round trips between backends and through files: numpy -> zarr -> numpy bit-exact, save_to_path /
copy_from_path / create_from_path on a LocalStore, and the classmethods' options."""

from __future__ import annotations

import logging
import warnings

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, MemoryStore

from replaybuf_core import ReadOnlyError, ReplayBuffer
from replaybuf_core.testing import assert_buffer_equal, assert_episode_equal, make_episode


def _all_dtypes_episode(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = rng.standard_normal(n)
    f[:: max(1, n // 3)] = np.nan
    return {
        "u8": rng.integers(0, 256, size=(n, 4, 4, 3), dtype=np.uint8),
        "i64": rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64, endpoint=True),
        "f16": f.astype(np.float16),
        "f32": (f * 1e30).astype(np.float32),
        "f64": f * 1e-300,
        "b": rng.random(n) > 0.5,
        "s": np.array([f"ep{seed}/step{i}" + "ü" * (i % 3) for i in range(n)], dtype=object),
    }


@pytest.fixture
def episodes():
    return [_all_dtypes_episode(n, i) for i, n in enumerate((5, 1, 9, 3))]


@pytest.fixture
def numpy_buffer(episodes):
    buf = ReplayBuffer.create_empty_numpy()
    for ep in episodes:
        buf.add_episode(ep)
    buf.update_meta({"fps": 10, "task": "push", "scale": [0.5, 2.0]})
    return buf


def _check_meta(buf):
    np.testing.assert_array_equal(np.asarray(buf.meta["fps"][...]), 10)
    assert np.asarray(buf.meta["task"][...], dtype=object).tolist() == "push"
    np.testing.assert_array_equal(np.asarray(buf.meta["scale"][...]), [0.5, 2.0])


def test_numpy_zarr_numpy_bit_exact(numpy_buffer, episodes):
    store = MemoryStore()
    assert numpy_buffer.save_to_store(store) is store
    z = ReplayBuffer(store)
    assert z.backend == "zarr"
    assert_buffer_equal(z, episodes)
    for k in episodes[0]:
        assert np.dtype(z.store.dtype("data", k)) == episodes[0][k].dtype
    _check_meta(z)
    back = ReplayBuffer.copy_from_store(store)
    assert back.backend == "numpy"
    assert_buffer_equal(back, episodes)
    _check_meta(back)
    for k in episodes[0]:
        a = np.asarray(back.data[k])
        b = np.asarray(numpy_buffer.data[k])
        assert a.dtype == b.dtype
        if a.dtype != object:
            assert a.tobytes() == b.tobytes(), k
        else:
            assert a.tolist() == b.tolist()


def test_copy_from_store_into_zarr_store(numpy_buffer, episodes):
    dst = MemoryStore()
    z = ReplayBuffer.copy_from_store(numpy_buffer.root, store=dst,
                                     chunks={"u8": (2, 4, 4, 3)}, compressors={"f64": "disk"})
    assert z.backend == "zarr"
    assert z.get_chunks()["u8"] == (2, 4, 4, 3)
    assert str(getattr(z.get_compressors()["f64"].cname, "value", z.get_compressors()["f64"].cname)) == "zstd"
    assert_buffer_equal(z, episodes)
    with pytest.raises(ValueError, match="rank"):
        ReplayBuffer.copy_from_store(numpy_buffer.root, store=MemoryStore(), chunks={"u8": (2,)})
    with pytest.raises(ValueError, match="unknown compressor"):
        ReplayBuffer.copy_from_store(numpy_buffer.root, store=MemoryStore(), compressors={"u8": "nope"})


def test_save_to_path_copy_from_path(numpy_buffer, episodes, tmp_path):
    path = tmp_path / "buf.zarr"
    store = numpy_buffer.save_to_path(path)
    assert isinstance(store, LocalStore)
    assert (path / "zarr.json").exists()
    mem = ReplayBuffer.copy_from_path(path)
    assert mem.backend == "numpy"
    assert_buffer_equal(mem, episodes)
    _check_meta(mem)
    # into a LocalStore (zarr -> zarr), keys subset
    dst = LocalStore(tmp_path / "copy.zarr")
    z = ReplayBuffer.copy_from_path(str(path), store=dst, keys=["u8", "s"])
    assert z.backend == "zarr" and z.keys() == ["s", "u8"]
    assert_buffer_equal(ReplayBuffer(str(tmp_path / "copy.zarr")),
                        [{"u8": e["u8"], "s": e["s"]} for e in episodes])


def test_save_to_path_chunks_compressors(numpy_buffer, episodes, tmp_path):
    numpy_buffer.save_to_path(tmp_path / "a.zarr", chunks={"i64": (3,)}, compressors={"i64": "disk"})
    z = ReplayBuffer.create_from_path(tmp_path / "a.zarr")
    assert z.get_chunks()["i64"] == (3,)
    assert_buffer_equal(z, episodes)


def test_zarr_to_zarr_keeps_layout(episodes, tmp_path):
    src = ReplayBuffer.create_empty_zarr()
    for ep in episodes:
        src.add_episode(ep, chunks={"f32": (2,)} if not src.n_episodes else None,
                        compressors={"f32": numcodecs.Zstd(level=1)} if not src.n_episodes else None)
    out = src.save_to_path(tmp_path / "z.zarr")
    again = ReplayBuffer(str(tmp_path / "z.zarr"))
    assert again.get_chunks() == src.get_chunks()
    assert again.chunk_size == src.chunk_size
    assert_buffer_equal(again, episodes)
    assert isinstance(out, LocalStore)


def test_create_from_path_read_only_and_home(numpy_buffer, episodes, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    numpy_buffer.save_to_path("~/home.zarr")
    assert (tmp_path / "home.zarr" / "zarr.json").exists()
    ro = ReplayBuffer.create_from_path("~/home.zarr")
    assert ro.read_only and ro.backend == "zarr"
    assert_buffer_equal(ro, episodes)
    with pytest.raises(ReadOnlyError):
        ro.add_episode(episodes[0])
    with pytest.raises(ReadOnlyError):
        ro.update_meta({"a": 1})
    with pytest.raises(ReadOnlyError):
        ro.set_chunks({"f64": (2,)})
    assert ro.n_episodes == len(episodes)
    mem = ReplayBuffer.copy_from_path("~/home.zarr")
    assert_buffer_equal(mem, episodes)
    with pytest.raises(FileNotFoundError):
        ReplayBuffer.create_from_path(tmp_path / "missing.zarr")


def test_copy_from_path_numpy_backend_is_deprecated(numpy_buffer, episodes, tmp_path, caplog):
    numpy_buffer.save_to_path(tmp_path / "d.zarr")
    with caplog.at_level(logging.WARNING, logger="replaybuf_core.store.buffer"):
        mem = ReplayBuffer.copy_from_path(tmp_path / "d.zarr", backend="numpy")
    assert mem.backend == "numpy"
    assert any("deprecated" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert_buffer_equal(mem, episodes)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="replaybuf_core.store.buffer"):
        ReplayBuffer.copy_from_path(tmp_path / "d.zarr")
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


def test_create_empty_zarr_storage_and_root():
    store = MemoryStore()
    buf = ReplayBuffer.create_empty_zarr(storage=store)
    buf.add_episode(make_episode(3))
    assert ReplayBuffer(store).n_steps == 3
    root = zarr.open_group(MemoryStore(), mode="w")
    root.attrs["keep"] = 1
    buf2 = ReplayBuffer.create_empty_zarr(root=root)
    buf2.add_episode(make_episode(2))
    assert buf2.root.attrs["keep"] == 1
    assert ReplayBuffer(root).n_steps == 2
    assert ReplayBuffer.create_empty_zarr(root=root).n_steps == 2  # existing content is kept


def test_create_from_group():
    g = zarr.open_group(MemoryStore(), mode="w")
    buf = ReplayBuffer.create_from_group(g)  # no data/meta yet: creates them
    assert buf.backend == "zarr" and buf.n_episodes == 0
    buf.add_episode(make_episode(4))
    again = ReplayBuffer.create_from_group(g)
    assert again.n_steps == 4
    assert_episode_equal(again.get_episode(0), make_episode(4))


def test_copy_if_exists(numpy_buffer, episodes):
    store = MemoryStore()
    numpy_buffer.save_to_store(store)
    with pytest.raises(FileExistsError):
        numpy_buffer.save_to_store(store, if_exists="raise")
    other = ReplayBuffer.create_empty_numpy()
    for ep in episodes[:2]:
        other.add_episode(ep)
    other.save_to_store(store)  # replace
    assert_buffer_equal(ReplayBuffer(store), episodes[:2])


def test_save_replace_drops_keys_the_new_buffer_lacks():
    store = MemoryStore()
    a = ReplayBuffer.create_empty_numpy()
    a.add_episode({"x": np.zeros(5), "y": np.ones(5)})
    a.save_to_store(store)
    b = ReplayBuffer.create_empty_numpy()
    b.add_episode({"x": np.arange(2.0)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "steps past episode_ends" trimming
        b.save_to_store(store)  # if_exists="replace" replaces the buffer, not only the arrays it has
        got = ReplayBuffer(store)
    assert got.keys() == ["x"]
    assert_buffer_equal(got, [{"x": np.arange(2.0)}])



def test_group_attributes_travel_with_copies(tmp_path):
    from replaybuf_core import ReplayBuffer as RB

    rb = RB.create_empty_zarr()
    rb.add_episode({"x": np.zeros((3, 2), "f4")})
    rb.store.set_attrs("data", {"conversions": {"x": {"source_dtype": "float64"}}})
    rb.save_to_path(tmp_path / "a.zarr")
    again = RB.copy_from_path(tmp_path / "a.zarr")
    assert again.store.get_attrs("data")["conversions"] == {"x": {"source_dtype": "float64"}}
