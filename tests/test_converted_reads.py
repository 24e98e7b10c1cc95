"""Camera frames converted as they are read (issue 48): ``read_rows(..., convert=)``, the window
sampler's ``sample_batch(convert=)`` and the datasets that use them.  Expected values come from
another path: the frames as stored, read by zarr-python (or the NumPy buffer's own array), indexed with
NumPy and converted by torch itself (``x.permute(...).float() / 255``, LeRobot's conversion)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer, WindowSampler
from replaybuf_core.layout.frame_convert import FrameConversion

torch = pytest.importorskip("torch")  # the expected values are torch's own conversion

from replaybuf_core.torch import WindowDataset  # noqa: E402  (needs torch)

H, W, N = 24, 32, 20
KINDS = ["fast", "exact", "raw", "video:h264:16:g4", "numpy", "version"]


def _frames(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, H, W, 3), dtype=np.uint8)


@pytest.fixture(scope="module", params=KINDS)
def store(request, tmp_path_factory):
    """(buffer, the camera as stored read another way, kind): JPEG (a frame a chunk), JPEG XL, no
    frame codec (zarr's default chunks: many frames a chunk), video (GOPs decoded in part), the NumPy
    backend (no ``rows_convert``: gathered, then converted) and an older version (read through its
    view, which has no ``rows_convert`` either)."""
    frames = _frames(N, 3)
    act = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    if request.param == "video:h264:16:g4":
        pytest.importorskip("av")
    if request.param == "numpy":
        rb = ReplayBuffer.create_empty_numpy()
        rb.add_episode({"cam": frames[:12], "act": act[:12]})
        rb.add_episode({"cam": frames[12:], "act": act[12:]})
        return rb, frames, request.param
    path = tmp_path_factory.mktemp("convert") / "s.zarr"
    with ReplayBuffer.create_empty("zarr", path) as rb:
        if request.param == "raw":
            rb.add_episode({"cam": frames[:12], "act": act[:12]})
            rb.add_episode({"cam": frames[12:], "act": act[12:]})
        else:
            with rb.writer(frames="fast" if request.param == "version" else request.param) as w:
                w.add_episode({"cam": frames[:12], "act": act[:12]})
                w.add_episode({"cam": frames[12:], "act": act[12:]})
    stored = zarr.open_group(str(path), mode="r")["data/cam"][:]  # as stored (lossy codecs), by zarr-python
    if request.param == "version":
        with ReplayBuffer(str(path)) as rb:
            rb.add_episode({"cam": _frames(4, 9), "act": np.zeros((4, 2), np.float32)})
        old = ReplayBuffer(str(path), version=-2)
        assert old.n_steps == N and old.store.capabilities.isdisjoint({"rows_convert", "rows_at"})
        return old, stored, request.param
    return ReplayBuffer.create_from_path(path), stored, request.param


def _torch_converted(frames: np.ndarray, conversion: FrameConversion) -> torch.Tensor:
    x = torch.from_numpy(np.ascontiguousarray(frames))
    if conversion.channels_first:
        x = x.movedim(-1, -3)
    return x.float() / 255 if conversion.to_float else x.contiguous()


CONVERSIONS = st.sampled_from([FrameConversion(True, True), FrameConversion(False, True), FrameConversion(True, False)])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), conversion=CONVERSIONS)
def test_rows_read_converted_equal_torchs_conversion_of_the_stored_frames(store, data, conversion):
    rb, stored, kind = store
    shape = data.draw(st.sampled_from([(7,), (3, 2), (1,), (0,), (5, 1)]))
    rows = np.asarray(data.draw(st.lists(st.integers(0, N - 1), min_size=int(np.prod(shape)),
                                         max_size=int(np.prod(shape)))), dtype=np.int64).reshape(shape)
    got = rb.read_rows("cam", rows, convert=conversion)
    want = _torch_converted(stored[rows], conversion)
    assert got.dtype == conversion.dtype and got.shape == tuple(want.shape)
    assert torch.equal(torch.from_numpy(got), want), kind
    if rows.size and kind != "version":  # at=: row i to out[at[i]] (a mixture's share of a batch)
        m = len(rows) + 2
        at = np.asarray(data.draw(st.permutations(range(m))))[:len(rows)]
        out = np.full((m,) + got.shape[1:], 7, dtype=got.dtype)
        rb.read_rows("cam", rows, out=out, at=at, convert=conversion)
        assert torch.equal(torch.from_numpy(out[at]), want)
        untouched = np.setdiff1d(np.arange(m), at)
        assert (out[untouched] == 7).all()


@pytest.mark.parametrize("pad_mode", ["edge", "zero"])
def test_window_batches_converted_equal_torchs_conversion_padding_included(store, pad_mode):
    rb, stored, kind = store
    sampler = WindowSampler(rb, {"cam": [-2, 0, 3], "act": [0, 1]}, pad_mode=pad_mode)
    conversion = FrameConversion(True, True)
    idx = np.arange(len(sampler))
    plain = sampler.sample_batch(idx)
    got = sampler.sample_batch(idx, convert={"cam": conversion})
    assert np.array_equal(got["cam_is_pad"], plain["cam_is_pad"]) and got["cam_is_pad"].any()
    assert np.array_equal(got["act"], plain["act"])
    want = _torch_converted(plain["cam"], conversion)
    assert torch.equal(torch.from_numpy(got["cam"]), want)
    if pad_mode == "zero":
        assert (got["cam"][got["cam_is_pad"]] == 0).all()
    else:  # the padding repeats the episode's edge frame, as stored
        ends = np.asarray(rb.episode_ends[:])
        loc = sampler.locate(idx)
        start = np.r_[0, ends][loc["episode_index"]]
        rel = np.clip(loc["frame_index"][:, None] + np.array([-2, 0, 3]), 0, ends[loc["episode_index"]][:, None]
                      - start[:, None] - 1)
        assert torch.equal(torch.from_numpy(got["cam"]), _torch_converted(stored[start[:, None] + rel], conversion))
    assert sampler.sample_shape("cam", conversion) == (3, 3, H, W)


def test_bad_conversions_are_refused_naming_the_key(store):
    rb, stored, kind = store
    sampler = WindowSampler(rb, {"cam": [0], "act": [0]})
    with pytest.raises(ValueError, match=r"'act'.*not sampled camera keys"):
        sampler.sample_batch([0], convert={"act": FrameConversion(True, True)})
    with pytest.raises(ValueError, match=r"'act' is not camera frames"):
        rb.read_rows("act", [0, 1], convert=FrameConversion(True, True))
    with pytest.raises(ValueError, match=r"reading 'cam' converted needs C-contiguous float32 \(2, 3, 24, 32\)"):
        rb.read_rows("cam", [0, 1], out=np.empty((2, H, W, 3), np.uint8), convert=FrameConversion(True, True))
    with pytest.raises(ValueError, match=r"not C-contiguous"):
        out = np.empty((2, 3, H, W * 2), np.float32)[..., ::2]
        rb.read_rows("cam", [0, 1], out=out, convert=FrameConversion(True, True))


@pytest.mark.parametrize("workers", [0, 1])
def test_datasets_under_a_plain_dataloader_equal_torchs_conversion(store, workers):
    """The datasets convert as the read decodes (in a worker: into the shared-memory batch)."""
    rb, stored, kind = store
    if kind in ("numpy", "version"):
        pytest.skip("opened from a path in each worker")
    ds = WindowDataset(rb.store.location()[0], {"cam": [-1, 0], "act": [0]}, channels_first=True, float_images=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=workers)
    seen = 0
    for batch in loader:
        idx = np.arange(seen, seen + len(batch["cam"]))
        plain = ds.sampler.sample_batch(idx)
        assert torch.equal(batch["cam"], _torch_converted(plain["cam"], FrameConversion(True, True)))
        seen += len(batch["cam"])
    assert seen == len(ds)


def test_the_zarr_backend_converts_as_it_decodes_without_a_gathered_uint8_batch(store, monkeypatch):
    """On the zarr backend (``"rows_convert"``) no read goes through the gather-then-convert path."""
    rb, stored, kind = store
    if kind in ("numpy", "version"):
        assert "rows_convert" not in rb.store.capabilities
        return
    def refused(*args, **kwargs):
        raise AssertionError("gathered as uint8, then converted")

    monkeypatch.setattr(FrameConversion, "convert_rows", refused)  # every fallback goes through it
    rows = np.array([[3, 4], [19, 0], [11, 12]])
    got = rb.read_rows("cam", rows, convert=FrameConversion(True, True))
    assert torch.equal(torch.from_numpy(got), _torch_converted(stored[rows], FrameConversion(True, True)))


def test_resized_frames_are_converted_after_their_resize(store):
    """``resize=`` with ``convert=``: the frames the resized read gives, converted (a resize is not
    fused with the decode's conversion: it is read as uint8 first)."""
    rb, stored, kind = store
    sampler = WindowSampler(rb, {"cam": [-1, 0], "act": [0]}, resize=(12, 16))
    conversion = FrameConversion(True, True)
    idx = np.arange(len(sampler))
    plain = sampler.sample_batch(idx)
    got = sampler.sample_batch(idx, convert={"cam": conversion})
    assert got["cam"].shape == (len(idx), 2, 3, 12, 16) == (len(idx),) + sampler.sample_shape("cam", conversion)
    assert torch.equal(torch.from_numpy(got["cam"]), _torch_converted(plain["cam"], conversion))


def test_a_buffer_whose_reads_take_no_convert_is_converted_after_the_read(store):
    """A duck-typed buffer (``read_rows`` without ``convert=``) under the datasets' helper: the
    frames are read as uint8 and converted after, to the same values."""
    from replaybuf_core.torch.images import sample_converted

    rb, stored, kind = store

    class Plain:
        episode_ends = rb.episode_ends

        def keys(self):
            return rb.keys()

        def __getitem__(self, key):
            return rb[key]

        def __contains__(self, key):
            return key in rb

        def read_rows(self, key, rows, out=None):
            return rb.read_rows(key, rows, out=out)

    sampler = WindowSampler(Plain(), {"cam": [-1, 0], "act": [0]})
    assert not sampler.converts and WindowSampler(rb, {"cam": [0]}).converts
    idx = np.arange(len(sampler))
    got = sample_converted(sampler, idx, ["cam"], True, True)
    want = _torch_converted(sampler.sample_batch(idx)["cam"], FrameConversion(True, True))
    assert torch.equal(torch.from_numpy(got["cam"]), want)


@pytest.mark.parametrize("convert", [None, FrameConversion(True, True)])
@pytest.mark.parametrize("pad_mode", ["zero", "edge"])
def test_a_batch_read_at_places_in_out_is_padded_at_those_places(store, pad_mode, convert):
    """``sample_batch(out=, at=)`` (a mixture's share of a batch): sample ``i`` lands in
    ``out[at[i]]``, its padding too — the zero padding used to be applied to the rows of ``out`` as if
    ``at`` were ``0..B-1`` (an IndexError when ``out`` had more rows, real frames zeroed otherwise:
    found by a break-it trial)."""
    rb, stored, kind = store
    sampler = WindowSampler(rb, {"cam": [-2, 0], "act": [0]}, pad_mode=pad_mode)
    idx = np.arange(len(sampler))
    alone = sampler.sample_batch(idx, convert=None if convert is None else {"cam": convert})
    m = len(idx) + 3
    at = np.random.default_rng(5).permutation(m)[:len(idx)]
    shape = (m,) + alone["cam"].shape[1:]
    out = {"cam": np.full(shape, 7, alone["cam"].dtype)}
    got = sampler.sample_batch(idx, out=out, at=at, convert=None if convert is None else {"cam": convert})
    assert got["cam"] is out["cam"] and alone["cam_is_pad"].any()
    assert np.array_equal(out["cam"][at], alone["cam"])
    assert (np.delete(out["cam"], at, axis=0) == 7).all()


def test_convert_of_the_wrong_type_is_refused_naming_what_was_given(store):
    rb, stored, kind = store
    sampler = WindowSampler(rb, {"cam": [0], "act": [0]})
    with pytest.raises(TypeError, match=r"reading 'cam'\) must be a FrameConversion, got bool"):
        rb.read_rows("cam", [0], convert=True)
    with pytest.raises(TypeError, match=r"FrameConversion objects; got \{'cam': 'bool'\}"):
        sampler.sample_batch([0], convert={"cam": True})
    with pytest.raises(TypeError, match=r"convert must be a dict"):
        sampler.sample_batch([0], convert=["cam"])
    with pytest.raises(ValueError, match=r"'act' is not a sampled camera key"):
        sampler.sample_shape("act", FrameConversion(True, True))


def test_one_row_given_as_an_int_reads_that_frame(store):
    """``read_rows(key, 3)``: the frame itself (step shape), on every backend (the zarr reader's
    gather failed on a 0-d rows array: "multiple indices are not supported for 0d arrays")."""
    rb, stored, kind = store
    assert np.array_equal(rb.read_rows("cam", 3), stored[3])
    out = np.empty((3, H, W), np.float32)
    assert rb.read_rows("cam", np.int64(5), out=out, convert=FrameConversion(True, True)) is out
    assert torch.equal(torch.from_numpy(out), _torch_converted(stored[5], FrameConversion(True, True)))
