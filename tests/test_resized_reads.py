"""Reduced-resolution reads (issue 48): ``read_rows(..., resize=)``, the samplers' and datasets'
``resize=`` / ``crop=``.  Expected frames come from another path: the full frames read by zarr-python
(or the NumPy buffer), cropped with NumPy and resized by Pillow — exactly equal where a codec has no
cheaper way (lossless JPEG XL / WebP: the same full decode), close where it has one (JPEG's DCT
scaling, video's libswscale scaling: a different interpolation of the same pixels)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from PIL import Image

from replaybuf_core import ReplayBuffer, WindowSampler
from replaybuf_core.layout.frame_resize import FrameResize

H, W = 96, 128


def smooth_frames(n: int, seed: int) -> np.ndarray:
    """Natural-looking frames (gradients, a moving disc): what lossy codecs and scaling are for."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W]
    out = np.empty((n, H, W, 3), np.uint8)
    for i in range(n):
        cy, cx = rng.integers(20, H - 20), rng.integers(20, W - 20)
        disc = ((y - cy) ** 2 + (x - cx) ** 2 < 15 ** 2) * 120
        for c in range(3):
            out[i, ..., c] = np.clip(x * (c + 1) + y + disc + 10 * c, 0, 255)
    return out


def expected(frames: np.ndarray, fr: FrameResize) -> np.ndarray:
    top, left, h, w = fr.region(H, W)
    return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(f[top:top + h, left:left + w])).resize(
        (fr.width, fr.height), Image.BILINEAR)) for f in frames])


@pytest.fixture(scope="module", params=["exact", "webp", "fast", "video:h264:16:g4", "numpy"])
def store(request, tmp_path_factory):
    frames = smooth_frames(20, 1)
    if request.param == "video:h264:16:g4":
        pytest.importorskip("av")
    if request.param == "numpy":
        rb = ReplayBuffer.create_empty_numpy()
        rb.add_episode({"cam": frames, "act": np.zeros((20, 2), np.float32)})
        return rb, frames, request.param
    path = tmp_path_factory.mktemp("resize") / "s.zarr"
    with ReplayBuffer.create_empty("zarr", path) as rb:
        with rb.writer(frames=request.param) as w:
            w.add_episode({"cam": frames[:12], "act": np.zeros((12, 2), np.float32)})
            w.add_episode({"cam": frames[12:], "act": np.zeros((8, 2), np.float32)})
    stored = zarr.open_group(str(path), mode="r")["data/cam"][:]  # the frames as stored (lossy codecs)
    return ReplayBuffer.create_from_path(path), stored, request.param


@pytest.mark.parametrize("fr", [FrameResize(48, 64), FrameResize(24, 32), FrameResize(40, 40, (10, 20, 80, 80)),
                                FrameResize(30, 50, None), FrameResize(96, 64, (0, 32, 96, 64))])
def test_resized_rows_equal_full_frames_cropped_and_resized(store, fr):
    rb, stored, kind = store
    rows = np.array([[3, 0], [19, 7], [12, 12]])
    got = rb.read_rows("cam", rows, dtypes="stored", resize=fr)
    assert got.shape == rows.shape + (fr.height, fr.width, 3) and got.dtype == np.uint8
    want = expected(stored[rows.reshape(-1)], fr).reshape(got.shape)
    diff = np.abs(got.astype(int) - want.astype(int))
    if kind in ("exact", "webp", "numpy"):  # no cheaper decode: the same pixels, resized the same way
        np.testing.assert_array_equal(got, want)
    else:  # another interpolation of the same frame
        assert diff.mean() < 3 and np.percentile(diff, 99) < 30, (kind, diff.mean(), diff.max())


def test_a_sampler_reads_cameras_at_the_size_asked_and_other_keys_as_they_are(store):
    rb, stored, _ = store
    s = WindowSampler(rb, {"cam": [-1, 0], "act": [0, 1]}, resize=(48, 64), crop=(0, 0, 96, 128), dtypes="stored")
    batch = s.sample_batch(np.arange(len(s)))
    assert batch["cam"].shape == (20, 2, 48, 64, 3) and batch["act"].shape == (20, 2, 2)
    full = WindowSampler(rb, {"cam": [-1, 0], "act": [0, 1]}, dtypes="stored").sample_batch(np.arange(20))
    np.testing.assert_array_equal(batch["cam_is_pad"], full["cam_is_pad"])
    np.testing.assert_array_equal(batch["act"], full["act"])


@pytest.mark.parametrize("resize, crop, error, match", [
    ((0, 10), None, ValueError, r"resize of camera key 'cam': the size must be positive"),
    ((97, 10), None, ValueError, r"resize of camera key 'cam': 97x10 is larger than its 96x128 frames"),
    ((10, 10), (0, 100, 10, 40), ValueError, r"crop of camera key 'cam': .* not inside its 96x128 frames"),
    ((50, 50), (0, 0, 40, 40), ValueError, r"50x50 is larger than its 40x40 crop"),
    ({"act": (1, 1)}, None, KeyError, r"\['act'\] are not camera keys here"),
    ((10.5, 10), None, ValueError, r"resize of camera key 'cam' must be 2 ints"),
])
def test_bad_sizes_and_crops_name_the_key(store, resize, crop, error, match):
    rb, _, _ = store
    with pytest.raises(error, match=match):
        WindowSampler(rb, {"cam": [0]}, resize=resize, crop=crop)


def test_read_rows_refuses_resizing_a_key_that_is_not_frames(store):
    rb, _, _ = store
    with pytest.raises(ValueError, match="data key 'act' is not camera frames"):
        rb.read_rows("act", [0], resize=(1, 1))
