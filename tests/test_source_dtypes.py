"""An imported key stored in another dtype than its source's (Push-T's float32 ``img``, stored as
uint8 frames) reads back in the source's dtype through every read path of the buffer, and in the
stored dtype when asked (``dtypes="stored"``); writes in the source dtype are stored exactly or
refused.  Expected values: the Push-T source read with zarr-python."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.sampling.window_sampler import WindowSampler

from shared_data import PUSHT

pytestmark = pytest.mark.skipif(not PUSHT.is_dir(), reason=f"Push-T data not found at {PUSHT}")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    from replaybuf_core.cli import main

    dst = tmp_path_factory.mktemp("dtypes") / "pusht.zarr"
    assert main(["import", str(PUSHT), str(dst), "--episodes", "0:3", "--no-progress"]) == 0
    src = zarr.open_group(str(PUSHT), mode="r")
    n = int(src["meta/episode_ends"][2])
    return dst, {k: src["data"][k][:n] for k in ("img", "state", "action")}, src["meta/episode_ends"][:3]


def test_every_read_path_gives_the_source_dtype(imported):
    path, source, ends = imported
    assert source["img"].dtype == np.float32
    rb = ReplayBuffer.create_from_path(path)
    assert rb.source_dtypes == {"img": np.dtype(np.float32)}
    assert zarr.open_array(path / "data/img", mode="r").dtype == np.uint8  # stored: a quarter of the bytes
    assert rb["img"].dtype == np.float32 and rb["img"].stored_dtype == np.uint8
    np.testing.assert_array_equal(rb["img"][:], source["img"])
    assert rb["img"][5:9].dtype == rb["img"][[1, 4]].dtype == rb["img"][3].dtype == np.float32
    ep = rb.get_episode(1)
    np.testing.assert_array_equal(ep["img"], source["img"][ends[0]:ends[1]])
    assert ep["img"].dtype == np.float32 and rb.get_episode(1, dtypes="stored")["img"].dtype == np.uint8
    assert rb.read_rows("img", [3, 0]).dtype == np.float32
    assert rb.read_rows("img", [3, 0], dtypes="stored").dtype == np.uint8
    seq = SequenceSampler(rb, 16, pad_before=1, pad_after=7, key_first_k={"img": 2})
    win = WindowSampler(rb, {"img": [-1, 0], "action": list(range(16))})
    for batch in (seq.sample_batch(np.arange(5)), seq[7], win.sample_batch(np.arange(5)), win[2]):
        assert batch["img"].dtype == np.float32
    assert SequenceSampler(rb, 4, dtypes="stored").sample_batch([0])["img"].dtype == np.uint8
    rb.warm(["img"])
    assert rb["img"][10:12].dtype == np.float32
    np.testing.assert_array_equal(rb["img"][10:12], source["img"][10:12])
    with pytest.raises(ValueError, match="dtypes must be"):
        rb.get_episode(0, dtypes="float32")


def test_warm_keys_are_sliced_in_the_source_dtype_from_one_copy(imported, tmp_path):
    """After ``warm``, ``rb[key]`` slices of a converted key come from one source-dtype copy (read-only
    views, no cast per slice — diffusion_policy's per-item path); a write drops that copy."""
    import shutil

    path, source, _ = imported
    rb = ReplayBuffer.create_from_path(path)
    rb.warm(["img"])
    a, b = rb["img"][10:12], rb["img"][11:14]
    assert a.dtype == b.dtype == np.float32 and not a.flags.writeable
    assert np.shares_memory(a, b)  # views of the one float32 copy
    np.testing.assert_array_equal(b, source["img"][11:14])
    np.testing.assert_array_equal(rb["img"][[5, 0]], source["img"][[5, 0]])
    assert rb["img"][3:5, 0, 0].dtype == np.float32
    shutil.copytree(path, tmp_path / "w.zarr")
    with ReplayBuffer(tmp_path / "w.zarr") as w:
        w.warm(["img"])
        np.testing.assert_array_equal(w["img"][0:3], source["img"][0:3])
        w["img"][1] = 9.0
        want = source["img"][0:3].copy()
        want[1] = 9.0
        np.testing.assert_array_equal(w["img"][0:3], want)  # not the copy made before the write
        w.warm(["img"])
        np.testing.assert_array_equal(w["img"][0:3], want)


def test_statistics_and_torch_batches_still_see_uint8_frames(imported):
    path, source, _ = imported
    rb = ReplayBuffer.create_from_path(path)
    stats = rb.get_stats(["img"])["img"]
    assert stats["mean"].shape == (3, 1, 1)  # per channel, on x / 255: frames, as before
    np.testing.assert_allclose(stats["mean"][:, 0, 0], (source["img"].astype(np.float64) / 255).mean(axis=(0, 1, 2)), rtol=1e-6)
    torch = pytest.importorskip("torch")
    from replaybuf_core.torch import WindowDataset

    ds = WindowDataset(str(path), {"img": [0]}, keys=["img"])
    assert ds[0]["img"].dtype == torch.uint8  # frames stay compact in batches ...
    ds = WindowDataset(str(path), {"img": [0]}, keys=["img"], float_images=True)
    assert ds[0]["img"].dtype == torch.float32 and float(ds[0]["img"].max()) <= 1.0  # ... or [0, 1]
    ds = WindowDataset(str(path), {"img": [0]}, keys=["img"], dtypes="source")
    assert ds[0]["img"].dtype == torch.float32  # or the source's, when asked


def test_writes_in_the_source_dtype_are_stored_exactly_or_refused(imported, tmp_path):
    import shutil

    path, source, ends = imported
    shutil.copytree(path, tmp_path / "w.zarr")
    with ReplayBuffer(tmp_path / "w.zarr") as rb:
        last = rb.pop_episode()
        assert last["img"].dtype == np.float32
        rb.add_episode(last)  # what came out goes back in
        np.testing.assert_array_equal(rb["img"][:], source["img"])
        bad = dict(last, img=last["img"] + 0.5)
        n = rb.n_steps
        with pytest.raises(ValueError, match="'img' is stored as uint8.*cannot be stored exactly"):
            rb.add_episode(bad)
        negative_zero = last["img"].copy()
        negative_zero[0, 0, 0, 0] = -0.0  # reads back as +0.0: not the same float
        with pytest.raises(ValueError, match="cannot be stored exactly"):
            rb.add_episode(dict(last, img=negative_zero))
        assert rb.n_steps == n
        with pytest.raises(ValueError, match="cannot be stored exactly"):
            rb["img"][0] = 300.0
        rb["img"][1] = 7.0
        want = source["img"].copy()
        want[1] = 7.0
        np.testing.assert_array_equal(rb["img"][:], want)


def test_merged_imports_keep_reading_in_the_source_dtype(imported, tmp_path):
    path, source, _ = imported
    ReplayBuffer.merge_stores([path, path], tmp_path / "m.zarr")
    rb = ReplayBuffer.create_from_path(tmp_path / "m.zarr")
    assert rb["img"].dtype == np.float32 and rb["img"].stored_dtype == np.uint8
    np.testing.assert_array_equal(rb["img"][:], np.concatenate([source["img"]] * 2))
