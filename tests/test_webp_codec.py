"""Tests for replaybuf_zarr.codecs.webp.WebPCodec (zarr v3 serializer "replaybuf.webp").

Real frames come from the PushT replay buffer in shared/data (read-only):
``data/img`` is (25650, 96, 96, 3) float32 holding integer RGB values.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import threading
from importlib.metadata import entry_points

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

from replaybuf_zarr.codecs import WebPCodec
from replaybuf_zarr.codecs import webp as webp_mod

from shared_data import PUSHT
N_REAL_FRAMES = 300


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB for uint8 images."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


@pytest.fixture(scope="module")
def real_frames() -> np.ndarray:
    """First N_REAL_FRAMES PushT frames as uint8 (T, 96, 96, 3), after checking they are integers."""
    if not PUSHT.exists():
        pytest.skip(f"{PUSHT} not available")
    group = zarr.open_group(str(PUSHT), mode="r")
    frames = group["data/img"][:N_REAL_FRAMES]
    assert frames.shape == (N_REAL_FRAMES, 96, 96, 3)
    assert frames.dtype == np.float32
    assert np.all(frames == np.round(frames)), "PushT frames are expected to hold integer values"
    assert frames.min() >= 0 and frames.max() <= 255
    return frames.astype(np.uint8)


def make_array(store, frames_shape, *, level=99, lossless=False, shards=None, name="img"):
    """Create a one-frame-per-chunk WebP array shaped like ``frames_shape``."""
    chunks = (1, *frames_shape[1:])
    return zarr.create_array(
        store,
        name=name,
        shape=frames_shape,
        chunks=chunks,
        shards=shards,
        dtype="uint8",
        serializer=WebPCodec(level=level, lossless=lossless),
        compressors=None,
    )


def encoded_sizes(frames: np.ndarray, level: int, lossless: bool = False) -> np.ndarray:
    codec = WebPCodec(level=level, lossless=lossless)
    return np.array([len(codec.encode_frame(frames[i : i + 1])) for i in range(len(frames))])


# --------------------------------------------------------------------------- real frames


def test_lossless_round_trip_real_frames_bit_exact(real_frames, tmp_path):
    arr = make_array(LocalStore(tmp_path), real_frames.shape, level=99, lossless=True)
    arr[:] = real_frames
    reopened = zarr.open_array(LocalStore(tmp_path), path="img", mode="r")
    out = reopened[:]
    assert out.dtype == np.uint8
    assert out.shape == real_frames.shape
    np.testing.assert_array_equal(out, real_frames)


def test_lossy_level_90_psnr_real_frames(real_frames, tmp_path):
    arr = make_array(LocalStore(tmp_path), real_frames.shape, level=90, lossless=False)
    arr[:] = real_frames
    out = arr[:]
    assert out.shape == real_frames.shape and out.dtype == np.uint8
    assert not np.array_equal(out, real_frames)  # really lossy
    # Measured: ~39.4 dB over the first 300 frames (libwebp 1.6.0).
    assert psnr(real_frames, out) >= 35.0
    worst = min(psnr(real_frames[i], out[i]) for i in range(len(out)))
    assert worst >= 30.0


def test_lossy_size_grows_with_level_real_frames(real_frames):
    """A higher level never gives a smaller encoding -- in the sense that really holds.

    Measured on 50 PushT frames at every level 0..100 (libwebp 1.6.0, method 4):
    * per frame, size is NOT monotonic in level: a higher level can be up to ~5 %
      smaller (694 of 5000 adjacent-level pairs), because libwebp maps quality to
      quantizers/filter strength with rounding and rate-distortion choices;
    * summed over the frames, adjacent levels can still drop by <= 0.2 %
      (39->40, 58->59, 61->62), while levels >= 2 apart were strictly increasing.
    So we assert: totals strictly increase over well-spaced levels; for adjacent
    levels the total drops by at most 1 %; per frame no drop exceeds 10 %.
    """
    frames = real_frames[::6]  # 50 frames
    spaced = [0, 20, 40, 60, 80, 90, 95, 99]
    sizes = {lv: encoded_sizes(frames, lv) for lv in spaced}
    totals = [int(sizes[lv].sum()) for lv in spaced]
    assert totals == sorted(totals) and len(set(totals)) == len(totals), totals
    for lo, hi in zip(spaced, spaced[1:]):
        assert np.all(sizes[hi] >= 0.9 * sizes[lo]), (lo, hi)

    for lo in (39, 58, 61, 99):  # the measured adjacent-level quirks, and 99 -> 100
        small, big = encoded_sizes(frames, lo).sum(), encoded_sizes(frames, lo + 1).sum()
        assert big >= 0.99 * small, (lo, small, big)


def test_lossless_is_smaller_than_raw_and_identical_across_levels(real_frames):
    frames = real_frames[:50]
    for level in (0, 50, 100):
        codec = WebPCodec(level=level, lossless=True)
        for i in range(len(frames)):
            data = codec.encode_frame(frames[i : i + 1])
            assert data[12:16] == b"VP8L"  # lossless bitstream
            assert len(data) < frames[i].nbytes
            np.testing.assert_array_equal(codec.decode_frame(data, (1, 96, 96, 3)), frames[i : i + 1])


def test_lossy_bitstream_is_vp8_even_at_level_100(real_frames):
    # imagecodecs.webp_encode goes lossless whenever lossless=None; the codec must pass
    # lossless=False explicitly so level 99/100 really are lossy.
    for level in (0, 99, 100):
        data = WebPCodec(level=level, lossless=False).encode_frame(real_frames[:1])
        assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
        assert data[12:16] == b"VP8 "


# --------------------------------------------------------------------------- colours / layouts


def test_rgb_order_preserved_and_standard_webp(tmp_path):
    """RGB in, RGB out; the stored chunk is a plain WebP file any decoder reads as RGB."""
    frame = np.zeros((1, 16, 16, 3), np.uint8)
    frame[0, :, :8, 0] = 255  # left half red
    frame[0, :, 8:, 2] = 255  # right half blue
    arr = make_array(LocalStore(tmp_path), (1, 16, 16, 3), lossless=True)
    arr[:] = frame
    np.testing.assert_array_equal(arr[:], frame)
    chunk_file = tmp_path / "img" / "c" / "0" / "0" / "0" / "0"
    PIL_Image = pytest.importorskip("PIL.Image")
    with PIL_Image.open(io.BytesIO(chunk_file.read_bytes())) as im:
        assert im.format == "WEBP"
        decoded = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(decoded, frame[0])


@pytest.mark.parametrize(
    "frame_shape",
    [(3, 20, 24), (3, 20, 24, 1), (3, 20, 24, 3), (3, 20, 24, 4)],
    ids=["gray-3d", "gray-1ch", "rgb", "rgba"],
)
def test_layout_lossless_round_trip(frame_shape):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, frame_shape, dtype=np.uint8)
    if len(frame_shape) == 4 and frame_shape[3] == 4:
        frames[0, ..., 3] = 255  # all-opaque frame: libwebp drops its alpha channel
        frames[1, ..., 3] = 0  # fully transparent frame: RGB must survive (exact mode)
    arr = make_array(MemoryStore(), frame_shape, lossless=True)
    arr[:] = frames
    out = arr[:]
    assert out.shape == frame_shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out, frames)


@pytest.mark.parametrize("frame_shape", [(2, 20, 24), (2, 20, 24, 1)])
def test_gray_lossy_close(frame_shape):
    yy, xx = np.mgrid[0:20, 0:24]
    frame = ((xx * 10 + yy * 3) % 256).astype(np.uint8)
    frames = np.broadcast_to(frame.reshape((1, 20, 24) + (1,) * (len(frame_shape) - 3)), frame_shape)
    arr = make_array(MemoryStore(), frame_shape, level=95, lossless=False)
    arr[:] = np.ascontiguousarray(frames)
    out = arr[:]
    assert out.shape == frame_shape and out.dtype == np.uint8
    assert psnr(frames, out) > 30.0


def test_decode_frame_rejects_wrong_image_size():
    codec = WebPCodec(lossless=True)
    data = codec.encode_frame(np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="8x8 px but the chunk shape"):
        codec.decode_frame(data, (1, 8, 9, 3))


def test_encode_runs_off_the_calling_and_event_loop_threads():
    """Encoding/decoding is pushed to worker threads (asyncio.to_thread)."""
    seen: set[str] = set()
    orig_encode, orig_decode = WebPCodec.encode_frame, WebPCodec.decode_frame

    def spy_encode(self, chunk):
        seen.add(threading.current_thread().name)
        return orig_encode(self, chunk)

    def spy_decode(self, data, shape):
        seen.add(threading.current_thread().name)
        return orig_decode(self, data, shape)

    mp = pytest.MonkeyPatch()
    mp.setattr(WebPCodec, "encode_frame", spy_encode)
    mp.setattr(WebPCodec, "decode_frame", spy_decode)
    try:
        frames = np.random.default_rng(1).integers(0, 256, (16, 8, 8, 3), dtype=np.uint8)
        arr = make_array(MemoryStore(), frames.shape, lossless=True)
        arr[:] = frames
        np.testing.assert_array_equal(arr[:], frames)
    finally:
        mp.undo()
    assert seen
    assert threading.main_thread().name not in seen
    assert "zarr_io" not in seen  # zarr's event-loop thread


# --------------------------------------------------------------------------- JSON / registry


def test_to_dict_from_dict_round_trip():
    for codec in (WebPCodec(), WebPCodec(level=0, lossless=True), WebPCodec(level=100)):
        d = codec.to_dict()
        assert d == {
            "name": "replaybuf.webp",
            "configuration": {"level": codec.level, "lossless": codec.lossless},
        }
        json.dumps(d)
        again = WebPCodec.from_dict(d)
        assert again == codec and hash(again) == hash(codec)
    # a method other than the default (4) is written, and read back; the default is left out, so the
    # zarr.json of arrays written before ``method`` existed stays as it was
    d = WebPCodec(level=0, lossless=True, method=1).to_dict()
    assert d["configuration"] == {"level": 0, "lossless": True, "method": 1}
    assert WebPCodec.from_dict(d) == WebPCodec(level=0, lossless=True, method=1) != WebPCodec(level=0, lossless=True)
    assert WebPCodec.from_dict({"name": "replaybuf.webp", "configuration": {"level": 0, "lossless": True}}).method == 4
    assert repr(WebPCodec(level=0, lossless=True, method=1)) == "WebPCodec(level=0, lossless=True, method=1)"
    with pytest.raises(ValueError, match="method"):
        WebPCodec(method=7)
    assert WebPCodec() == WebPCodec(level=99, lossless=False)
    assert WebPCodec(level=98) != WebPCodec(level=99)
    assert WebPCodec(lossless=True) != WebPCodec(lossless=False)
    assert repr(WebPCodec(level=7, lossless=True)) == "WebPCodec(level=7, lossless=True)"
    assert eval(repr(WebPCodec(level=7)), {"WebPCodec": WebPCodec}) == WebPCodec(level=7)


def test_from_dict_defaults_and_errors():
    assert WebPCodec.from_dict({"name": "replaybuf.webp"}) == WebPCodec()
    assert WebPCodec.from_dict({"name": "replaybuf.webp", "configuration": {"level": 5}}) == WebPCodec(
        level=5
    )
    with pytest.raises(ValueError):
        WebPCodec.from_dict({"name": "bytes", "configuration": {"level": 5}})
    with pytest.raises(TypeError, match="quality"):
        WebPCodec.from_dict({"name": "replaybuf.webp", "configuration": {"quality": 5}})
    with pytest.raises(TypeError):
        WebPCodec.from_dict({"name": "replaybuf.webp", "configuration": {"level": 5.5}})


def test_numpy_level_and_lossless_are_normalised():
    codec = WebPCodec(level=np.int64(42), lossless=np.bool_(True))
    assert type(codec.level) is int and type(codec.lossless) is bool
    assert codec == WebPCodec(level=42, lossless=True)
    json.dumps(codec.to_dict())


def test_registered_with_zarr_and_entry_point():
    assert zarr.registry.get_codec_class("replaybuf.webp") is WebPCodec
    eps = [ep for ep in entry_points(group="zarr.codecs") if ep.name == "replaybuf.webp"]
    assert len(eps) == 1
    assert eps[0].value == "replaybuf_zarr.codecs.webp:WebPCodec"
    assert eps[0].load() is WebPCodec


def test_zarr_json_contains_codec(tmp_path):
    make_array(LocalStore(tmp_path), (2, 8, 8, 3), level=77, lossless=True)
    meta = json.loads((tmp_path / "img" / "zarr.json").read_text())
    assert meta["codecs"] == [
        {"name": "replaybuf.webp", "configuration": {"level": 77, "lossless": True}}
    ]
    reopened = zarr.open_array(LocalStore(tmp_path), path="img", mode="r")
    assert reopened.serializer == WebPCodec(level=77, lossless=True)


def test_fresh_process_reads_without_importing_replaybuf(tmp_path, real_frames):
    frames = real_frames[:20]
    root = zarr.open_group(LocalStore(tmp_path / "buf.zarr"), mode="w")
    lossless = root.create_array(
        "data/img", shape=frames.shape, chunks=(1, 96, 96, 3), dtype="uint8",
        serializer=WebPCodec(lossless=True), compressors=None,
    )
    lossless[:] = frames
    sharded = root.create_array(
        "data/img_sharded", shape=frames.shape, chunks=(1, 96, 96, 3), shards=(8, 96, 96, 3),
        dtype="uint8", serializer=WebPCodec(lossless=True), compressors=None,
    )
    sharded[:] = frames
    np.save(tmp_path / "expected.npy", frames)

    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import zarr
        assert not any(m.startswith("replaybuf") for m in sys.modules), "replaybuf imported early"
        g = zarr.open_group({str(tmp_path / "buf.zarr")!r}, mode="r")
        expected = np.load({str(tmp_path / "expected.npy")!r})
        for name in ("data/img", "data/img_sharded"):
            got = g[name][:]
            assert got.dtype == np.uint8 and got.shape == expected.shape, (got.dtype, got.shape)
            assert np.array_equal(got, expected), name
        a = zarr.open_array({str(tmp_path / "buf.zarr")!r}, path="data/img", mode="r")
        assert np.array_equal(a[3:7], expected[3:7])
        # found through the zarr.codecs entry point, which imported the codec module lazily
        print(type(a.serializer).__module__, type(a.serializer).__name__)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["replaybuf_zarr.codecs.webp", "WebPCodec"]


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("level", "exc", "match"),
    [
        (True, TypeError, "True"),
        (False, TypeError, "False"),
        (90.0, TypeError, "90.0"),
        ("90", TypeError, "'90'"),
        (None, TypeError, "None"),
        (np.float32(90), TypeError, "float32"),
        (-1, ValueError, "-1"),
        (101, ValueError, "101"),
    ],
)
def test_bad_level(level, exc, match):
    with pytest.raises(exc, match=match):
        WebPCodec(level=level)


@pytest.mark.parametrize("lossless", [1, 0, "yes", None, 1.0])
def test_bad_lossless(lossless):
    with pytest.raises(TypeError, match="lossless must be a bool"):
        WebPCodec(lossless=lossless)


def test_positional_arguments_rejected():
    with pytest.raises(TypeError):
        WebPCodec(90)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("shape", "chunks", "dtype", "exc", "match"),
    [
        ((4, 8, 8, 3), (1, 8, 8, 3), "float32", TypeError, "float32"),
        ((4, 8, 8, 3), (1, 8, 8, 3), "uint16", TypeError, "uint16"),
        ((4, 8, 8, 3), (1, 8, 8, 3), "int8", TypeError, "int8"),
        ((4, 8), (1, 8), "uint8", ValueError, "got 2-D"),
        ((4, 8, 8, 3, 1), (1, 8, 8, 3, 1), "uint8", ValueError, "got 5-D"),
        ((4, 8, 8, 3), (2, 8, 8, 3), "uint8", ValueError, "one frame per chunk.*2 frames"),
        ((4, 8, 8), (4, 8, 8), "uint8", ValueError, "4 frames"),
        ((4, 8, 8, 2), (1, 8, 8, 2), "uint8", ValueError, "has 2 channels"),
        ((4, 8, 8, 5), (1, 8, 8, 5), "uint8", ValueError, "has 5 channels"),
        ((4, 8, 8, 6), (1, 8, 8, 3), "uint8", ValueError, "has 6 channels"),
        ((1, 16383, 8, 3), (1, 16383, 8, 3), "uint8", ValueError, "height 16383 px exceeds"),
        ((1, 8, 16383), (1, 8, 16383), "uint8", ValueError, "width 16383 px exceeds"),
        ((1, 8, 20000, 1), (1, 8, 20000, 1), "uint8", ValueError, "width 20000 px exceeds"),
    ],
)
def test_validation_at_array_creation(shape, chunks, dtype, exc, match):
    with pytest.raises(exc, match=match):
        zarr.create_array(
            MemoryStore(), shape=shape, chunks=chunks, dtype=dtype,
            serializer=WebPCodec(), compressors=None,
        )


def test_channel_axis_must_not_be_split():
    codec = WebPCodec()
    # the grid as zarr.json writes it (validate reads any zarr's grid object through to_dict())
    grid = {"name": "regular", "configuration": {"chunk_shape": [1, 8, 8, 3]}}
    with pytest.raises(ValueError, match="all channels"):
        codec.validate(shape=(4, 8, 8, 4), dtype=zarr.dtype.UInt8(), chunk_grid=grid)


def test_irregular_chunk_grid_is_refused():
    grid = {"name": "rectilinear", "configuration": {"chunk_shapes": [[1, 1], [8], [8], [3]]}}
    with pytest.raises(TypeError, match="regular chunk grid.*rectilinear"):
        WebPCodec().validate(shape=(2, 8, 8, 3), dtype=zarr.dtype.UInt8(), chunk_grid=grid)


def test_validate_reads_the_grid_zarr_itself_builds():
    """The grid object of the installed zarr (whatever its class) goes through ``to_dict()``."""
    arr = zarr.create_array(MemoryStore(), shape=(2, 8, 8, 3), chunks=(1, 8, 8, 3), dtype="uint8",
                            serializer=WebPCodec(lossless=True), compressors=None)
    WebPCodec().validate(shape=(2, 8, 8, 3), dtype=zarr.dtype.UInt8(), chunk_grid=arr.metadata.chunk_grid)


def test_largest_side_accepted():
    arr = zarr.create_array(
        MemoryStore(), shape=(1, 2, webp_mod.MAX_FRAME_SIDE), chunks=(1, 2, webp_mod.MAX_FRAME_SIDE),
        dtype="uint8", serializer=WebPCodec(lossless=True), compressors=None,
    )
    frame = np.arange(2 * webp_mod.MAX_FRAME_SIDE, dtype=np.uint64).reshape(1, 2, -1) % 251
    arr[:] = frame.astype(np.uint8)
    np.testing.assert_array_equal(arr[:], frame.astype(np.uint8))


@pytest.mark.parametrize(
    ("inner", "dtype", "exc", "match"),
    [
        ((1, 8, 8, 3), "float32", TypeError, "float32"),
        ((1, 8, 8, 2), "uint8", ValueError, "2 channels"),
    ],
)
def test_validation_inside_sharding_at_creation(inner, dtype, exc, match):
    # ShardingCodec.validate does not call the inner codecs' validate; these checks run in
    # WebPCodec.evolve_from_array_spec, which ShardingCodec does forward.
    with pytest.raises(exc, match=match):
        zarr.create_array(
            MemoryStore(), shape=(8, *inner[1:]), chunks=inner, shards=(8, *inner[1:]),
            dtype=dtype, serializer=WebPCodec(), compressors=None,
        )


def test_multi_frame_inner_chunk_inside_sharding_fails_at_creation_or_first_write():
    # zarr < 3.2 gives the inner codec no creation-time hook that sees the inner chunk shape
    # unambiguously, so there it surfaces at the first write; newer zarr validates inner codecs.
    with pytest.raises(ValueError, match="one frame per chunk"):
        arr = zarr.create_array(
            MemoryStore(), shape=(8, 8, 8, 3), chunks=(2, 8, 8, 3), shards=(8, 8, 8, 3),
            dtype="uint8", serializer=WebPCodec(), compressors=None,
        )
        arr[:] = 1


def test_encode_frame_checks():
    codec = WebPCodec()
    with pytest.raises(TypeError, match="float64"):
        codec.encode_frame(np.zeros((1, 4, 4, 3)))
    with pytest.raises(ValueError, match="2 frames"):
        codec.encode_frame(np.zeros((2, 4, 4, 3), np.uint8))


def test_compute_encoded_size_not_fixed():
    assert WebPCodec.is_fixed_size is False
    with pytest.raises(NotImplementedError):
        WebPCodec().compute_encoded_size(100, None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- property-based


@settings(max_examples=30, deadline=None)
@given(
    height=st.integers(1, 64),
    width=st.integers(1, 64),
    channels=st.sampled_from([None, 1, 3, 4]),
    level=st.integers(0, 100),
    lossless=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_round_trip(height, width, channels, level, lossless, seed):
    shape = (1, height, width) if channels is None else (1, height, width, channels)
    x = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    codec = WebPCodec(level=level, lossless=lossless)
    y = codec.decode_frame(codec.encode_frame(x), shape)
    assert y.shape == x.shape and y.dtype == np.uint8
    if lossless:
        np.testing.assert_array_equal(y, x)

    # same through zarr's async codec pipeline
    arr = make_array(MemoryStore(), (2, *shape[1:]), level=level, lossless=lossless)
    arr[1:2] = x
    z = arr[1:2]
    assert z.shape == x.shape and z.dtype == np.uint8
    np.testing.assert_array_equal(z, y)  # deterministic encoder: same bytes, same pixels
