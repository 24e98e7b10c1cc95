"""The frame codec ladder: lossless JPEG XL (``exact``), JPEG (``fast``), WebP — each a zarr v3
serializer plain zarr-python reads, each reached through ``frames=`` / ``--frames``.

Expected pixels come from an independent path: imagecodecs / Pillow decoding the stored chunk bytes
(read as files, not through our codec), and the source frames themselves for lossless codecs.
Natural frames are the GR00T sample's h264 video, decoded with PyAV.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
import sys

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.frame_choice import (FrameChoice, choose_frames, parse_frame_choice, parse_frames,
                                                resolve_frames)
from replaybuf_core.store.creation import create_replay_buffer
from replaybuf_zarr.codecs import FRAME_CODECS, JpegCodec, JpegXLCodec, WebPCodec
from replaybuf_zarr.frame_choice import zarr_frame_codec

from shared_data import LEROBOT_V2_GR00T

GR00T_VIDEO = (LEROBOT_V2_GR00T / "videos/chunk-000/observation.images.ego_view"
               / "episode_000000.mp4")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


@pytest.fixture(scope="module")
def natural() -> np.ndarray:
    """16 natural 256x256 RGB frames (the GR00T sample's h264 decode, every 20th frame)."""
    av = pytest.importorskip("av")
    if not GR00T_VIDEO.exists():
        pytest.skip(f"{GR00T_VIDEO} not available")
    with av.open(str(GR00T_VIDEO)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return np.stack(frames[::20][:16])


def _array(store, frames: np.ndarray, codec) -> zarr.Array:
    a = zarr.create_array(store, name="img", shape=frames.shape, chunks=(1,) + frames.shape[1:], dtype="uint8",
                          serializer=codec, compressors=None)
    a[:] = frames
    return a


@pytest.mark.parametrize("codec", [JpegXLCodec(), JpegXLCodec(effort=3), WebPCodec(level=90, lossless=True),
                                   WebPCodec(level=0, lossless=True, method=1)])
def test_lossless_codecs_round_trip_natural_frames_bit_for_bit(tmp_path, natural, codec):
    _array(zarr.storage.LocalStore(tmp_path / "s.zarr"), natural, codec)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr/img", mode="r")[:], natural)
    # the chunk files are ordinary image files: decoded by imagecodecs directly, not through our codec
    import imagecodecs

    decode = imagecodecs.jpegxl_decode if isinstance(codec, JpegXLCodec) else imagecodecs.webp_decode
    first = (tmp_path / "s.zarr/img/c/0/0/0/0").read_bytes()
    np.testing.assert_array_equal(decode(first), natural[0])


@pytest.mark.parametrize("subsampling, floor_db", [("444", 40.0), ("420", 38.0)])
def test_jpeg_frames_are_jpeg_files_pillow_decodes_and_meet_their_psnr(tmp_path, natural, subsampling, floor_db):
    from PIL import Image

    _array(zarr.storage.LocalStore(tmp_path / "s.zarr"), natural, JpegCodec(quality=95, subsampling=subsampling))
    got = zarr.open_array(tmp_path / "s.zarr/img", mode="r")[:]
    for i in (0, 7, 15):
        data = (tmp_path / f"s.zarr/img/c/{i}/0/0/0").read_bytes()
        img = Image.open(io.BytesIO(data))
        assert img.format == "JPEG" and img.size == (256, 256)
        ref = np.asarray(img.convert("RGB"))
        assert np.abs(ref.astype(int) - got[i]).max() <= 2  # libjpeg-turbo vs Pillow's IDCT rounding
        assert psnr(natural[i], got[i]) >= floor_db


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 40), w=st.integers(1, 40), channels=st.sampled_from([0, 1, 3, 4]),
       effort=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_jpegxl_is_exact_for_any_frame(h, w, channels, effort, seed):
    rng = np.random.default_rng(seed)
    shape = (2, h, w) if channels == 0 else (2, h, w, channels)
    frames = rng.integers(0, 256, shape, dtype=np.uint8)
    a = _array(zarr.storage.MemoryStore(), frames, JpegXLCodec(effort=effort))
    np.testing.assert_array_equal(a[:], frames)


@settings(max_examples=20, deadline=None)
@given(h=st.integers(1, 40), w=st.integers(1, 40), gray=st.booleans(), quality=st.integers(1, 100),
       sub=st.sampled_from(["444", "420"]))
def test_jpeg_keeps_shape_and_dtype_for_any_frame(h, w, gray, quality, sub):
    shape = (1, h, w) if gray else (1, h, w, 3)
    frames = np.full(shape, 128, np.uint8)  # a flat frame survives JPEG almost exactly at any quality
    got = _array(zarr.storage.MemoryStore(), frames, JpegCodec(quality=quality, subsampling=sub))[:]
    assert got.shape == shape and got.dtype == np.uint8
    assert np.abs(got.astype(int) - 128).max() <= 2


def test_codec_settings_are_written_to_zarr_json_and_read_by_plain_zarr(tmp_path):
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    _array(zarr.storage.LocalStore(tmp_path / "s.zarr"), frames, JpegCodec(quality=80, subsampling="420"))
    meta = json.loads((tmp_path / "s.zarr/img/zarr.json").read_text())
    assert meta["codecs"] == [{"name": "replaybuf.jpeg", "configuration": {"quality": 80, "subsampling": "420"}}]
    # a fresh interpreter that never imports replaybuf reads it through zarr's codec entry point
    code = ("import zarr, sys; a = zarr.open_array(sys.argv[1], mode='r'); "
            "print(a[:].shape, type(a.metadata.codecs[0]).__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.zarr/img")], capture_output=True,
                         text=True, check=True).stdout
    assert "(2, 16, 16, 3) JpegCodec" in out
    assert set(FRAME_CODECS) == {"replaybuf.webp", "replaybuf.jpegxl", "replaybuf.jpeg", "replaybuf.video"}


def test_bad_codec_settings_and_frames_are_refused_by_name():
    with pytest.raises(ValueError, match="quality must be in 1..100, got 0"):
        JpegCodec(quality=0)
    with pytest.raises(ValueError, match="subsampling must be one of"):
        JpegCodec(subsampling="422")
    with pytest.raises(TypeError, match="effort must be an int"):
        JpegXLCodec(effort=True)
    with pytest.raises(ValueError, match=r"JpegCodec supports 1 \(gray\) or 3 \(RGB\) channels"):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(2, 8, 8, 4), chunks=(1, 8, 8, 4), dtype="uint8",
                          serializer=JpegCodec(), compressors=None)
    with pytest.raises(TypeError, match="JpegXLCodec only stores uint8"):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(2, 8, 8, 3), chunks=(1, 8, 8, 3), dtype="uint16",
                          serializer=JpegXLCodec(), compressors=None)
    with pytest.raises(TypeError, match="unknown replaybuf.jpegxl configuration keys"):
        JpegXLCodec.from_dict({"name": "replaybuf.jpegxl", "configuration": {"distance": 1}})


def test_the_frames_grammar():
    assert parse_frame_choice("exact") == FrameChoice("jpegxl", effort=1)
    assert parse_frame_choice("FAST") == FrameChoice("jpeg", 95, subsampling="444")
    assert parse_frame_choice("jpeg420:80") == FrameChoice("jpeg", 80, subsampling="420")
    assert parse_frame_choice("webp") == FrameChoice("webp") and parse_frame_choice("webp").lossless
    assert not parse_frame_choice("webp:0").lossless
    assert parse_frame_choice("webp:m1") == FrameChoice("webp", method=1) and parse_frame_choice("webp:m1").lossless
    for text in ("exact", "fast", "jpegxl:4", "webp", "webp:70", "webp:m0", "jpeg:90", "jpeg420:85"):
        c = parse_frame_choice(text)
        assert parse_frame_choice(str(c)) == c  # str() is the --frames spelling
    for bad, msg in (("png", "unknown frame codec 'png'"), ("jpeg:0", "in 1..100"), ("webp:x", "an integer"),
                     ("jpegxl:10", "in 1..9"), ("webp:m7", "method must be in 0..6")):
        with pytest.raises(ValueError, match=msg):
            parse_frame_choice(bad)
    assert parse_frames("a=fast, *=webp") == {"a": parse_frame_choice("fast"), "*": FrameChoice("webp")}
    with pytest.raises(ValueError, match="given twice"):
        parse_frames("a=fast,a=exact")
    with pytest.raises(ValueError, match=r"\['typo'\] are not camera-frame keys"):
        resolve_frames("typo=fast", ["front", "wrist"])
    assert resolve_frames({"wrist": "fast"}, ["front", "wrist"]) == {
        "front": parse_frame_choice("exact"), "wrist": parse_frame_choice("fast")}


def _schema(tmp_path, name):
    from replaybuf_core.layout.schema import DatasetSchema

    def spec(shape, dtype):
        return {"shape": shape, "chunks": (1,) + shape[1:], "dtype": dtype, "needs_compressor": True}

    return DatasetSchema(tmp_path / name, {"front": spec((0, 24, 32, 3), "uint8"),
                                           "wrist": spec((0, 24, 32, 4), "uint8"),
                                           "action": spec((0, 2), "float32")})


@pytest.mark.parametrize("h, w, small", [(96, 96, True), (84, 84, True), (96, 97, False), (128, 128, False),
                                         (256, 256, False), (480, 640, False), (16, 512, True)])
def test_the_exact_tier_is_webp_method_1_for_frames_up_to_96x96_px(tmp_path, h, w, small):
    """``exact`` resolves per camera: lossless WebP (libwebp method 1) for frames of at most 96 × 96
    pixels, lossless JPEG XL above; written into zarr.json as such and read back bit for bit (the
    WebP file decoded by imagecodecs directly).  An explicit ``jpegxl`` stays JPEG XL at any size."""
    cams = {"cam": ((3, h, w, 3), np.uint8)}
    got = choose_frames(None, cams)["cam"]
    assert got == (FrameChoice("webp", method=1) if small else FrameChoice("jpegxl", effort=1))
    assert choose_frames("exact", cams)["cam"] == got and choose_frames("jpegxl", cams)["cam"].codec == "jpegxl"
    if not small or h * w > 96 * 96:
        return
    frames = np.random.default_rng(h + w).integers(0, 256, (2, h, w, 3), dtype=np.uint8)
    a = _array(zarr.storage.LocalStore(tmp_path / "s.zarr"), frames, zarr_frame_codec(got))
    doc = json.loads((tmp_path / "s.zarr" / "img" / "zarr.json").read_text())
    assert doc["codecs"][0]["configuration"] == {"level": 0, "lossless": True, "method": 1}
    np.testing.assert_array_equal(a[:], frames)
    import imagecodecs

    chunk = (tmp_path / "s.zarr" / "img" / "c" / "1" / "0" / "0" / "0").read_bytes()
    np.testing.assert_array_equal(imagecodecs.webp_decode(chunk), frames[1])


def test_schema_creation_chooses_codecs_per_key_and_refuses_jpeg_on_rgba(tmp_path):
    rng = np.random.default_rng(0)
    eps = [{"front": rng.integers(0, 256, (5, 24, 32, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (5, 24, 32, 4), dtype=np.uint8),
            "action": rng.random((5, 2), dtype=np.float32)} for _ in range(2)]
    with pytest.raises(ValueError, match="'wrist' has 4 channels"):
        create_replay_buffer(_schema(tmp_path, "bad.zarr"), eps, progress=False, frames="fast")
    assert not (tmp_path / "bad.zarr").exists()  # refused before the path was touched
    rb = create_replay_buffer(_schema(tmp_path, "ok.zarr"), eps, progress=False, frames={"front": "fast"})
    codecs = rb.get_compressors()
    assert codecs["front"] == JpegCodec(quality=95, subsampling="444")
    assert codecs["wrist"] == WebPCodec(level=0, lossless=True, method=1)  # the rest: exact (small frames)
    again = ReplayBuffer.create_from_path(tmp_path / "ok.zarr")
    np.testing.assert_array_equal(again["wrist"][:], np.concatenate([e["wrist"] for e in eps]))
    assert psnr(again["front"][:], np.concatenate([e["front"] for e in eps])) > 25  # random noise: JPEG's worst case


def test_an_import_stores_each_camera_in_its_codec_and_reports_psnr_and_bytes(tmp_path, capsys):
    pytest.importorskip("av")
    from replaybuf_core.cli import main
    from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset

    root = write_dataset(tmp_path / "ds", Spec([6, 4], fps=10, cameras={"front": Camera(32, 48), "wrist": Camera(32, 48)}),
                         "v2.1")
    assert main(["import", str(root), str(tmp_path / "o.zarr"), "--no-progress", "--frames", "front=jpeg:90"]) == 0
    out = capsys.readouterr().out
    assert "replaybuf.jpeg(quality=90, subsampling=444)" in out and "PSNR" in out
    assert out.count(" a frame, ") == 2 and "x the source's" in out  # bytes a frame, against the mp4s
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    assert rb.get_compressors()["wrist"] == WebPCodec(level=0, lossless=True, method=1)
    assert rb.store.get_attrs("data")["import"]["frames"] == {"front": "jpeg:90", "wrist": "webp:m1"}
    # the source decoded independently (PyAV): the exact camera is bit for bit, the lossy one close
    import av

    mp4s = sorted((root / "videos").rglob("*.mp4"))
    wrist = [p for p in mp4s if "wrist" in str(p)]
    with av.open(str(wrist[0])) as c:
        first = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    np.testing.assert_array_equal(rb["wrist"][:6], first[:6])


def test_rechunk_and_copy_convert_cameras_between_codecs(tmp_path, capsys):
    from replaybuf_core.cli import main

    store = tmp_path / "s.zarr"
    assert main(["synth", "radial", str(store), "--episodes", "6", "--length", "10", "--image-size", "32"]) == 0
    rb = ReplayBuffer.create_from_path(store)
    before, actions = rb["image"][:], rb["action"][:]
    assert rb.get_compressors()["image"] == WebPCodec(level=0, lossless=True, method=1)
    assert main(["rechunk", str(store), "--frames", "bogus=fast"]) == 2
    assert "not camera-frame keys" in capsys.readouterr().err
    assert main(["rechunk", str(store), "--frames", "fast"]) == 0
    assert "image: frames now jpeg:95" in capsys.readouterr().out
    rb = ReplayBuffer.create_from_path(store)
    assert rb.get_compressors()["image"] == JpegCodec(quality=95, subsampling="444")
    assert psnr(before, rb["image"][:]) > 30
    np.testing.assert_array_equal(rb["action"][:], actions)  # the other keys untouched
    lossy = rb["image"][:]
    assert main(["copy", str(store), str(tmp_path / "c.zarr"), "--frames", "exact"]) == 0
    copy = ReplayBuffer.create_from_path(tmp_path / "c.zarr")
    assert copy.get_compressors()["image"] == WebPCodec(level=0, lossless=True, method=1)
    np.testing.assert_array_equal(copy["image"][:], lossy)  # exact from here on: the lossy pixels kept


def test_a_frame_libjxl_effort_1_changes_is_still_stored_exactly(tmp_path):
    """libjxl 0.11's effort-1 encoder changes one pixel of this synthetic frame (libjxl #4287): the codec
    checks every frame after encoding and falls back to a higher effort."""
    import imagecodecs

    frame = np.load(Path(__file__).parent / "data" / "jxl_e1_not_lossless.npy")
    raw = imagecodecs.jpegxl_decode(imagecodecs.jpegxl_encode(frame, lossless=True, effort=1, numthreads=1))
    if np.array_equal(raw, frame):
        pytest.skip(f"libjxl {imagecodecs.jpegxl_version()} encodes this frame exactly at effort 1 (fixed)")
    a = _array(zarr.storage.LocalStore(tmp_path / "s.zarr"), frame[None], JpegXLCodec())
    np.testing.assert_array_equal(a[:][0], frame)
    stored = (tmp_path / "s.zarr/img/c/0/0/0/0").read_bytes()
    np.testing.assert_array_equal(imagecodecs.jpegxl_decode(stored), frame)


def _inner_serializer(meta_path: Path) -> dict:
    """The frame serializer of an array's ``zarr.json``, read as the Zarr v3 spec writes it (inside
    ``sharding_indexed`` when the array is sharded)."""
    codecs = json.loads(meta_path.read_text())["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        codecs = codecs[0]["configuration"]["codecs"]
    return codecs[0]


def test_the_episode_writer_records_cameras_in_the_codecs_frames_names(tmp_path, natural):
    rng = np.random.default_rng(1)
    store = tmp_path / "rec.zarr"
    rb = ReplayBuffer.create_empty("zarr", store)
    eps = [{"front": natural[:8], "wrist": natural[8:, :, :, :1].copy(),
            "action": rng.random((8, 7)).astype(np.float32)} for _ in range(3)]
    with rb.writer(frames="front=fast,*=exact") as w:
        for ep in eps:
            w.add_episode(ep)
    front = _inner_serializer(store / "data/front/zarr.json")
    assert front["name"] == "replaybuf.jpeg" and front["configuration"]["quality"] == 95
    assert _inner_serializer(store / "data/wrist/zarr.json")["name"] == "replaybuf.jpegxl"
    assert _inner_serializer(store / "data/action/zarr.json")["name"] == "bytes"  # numbers stay Blosc
    again = zarr.open_group(store, mode="r")  # plain zarr reads what the writer wrote
    np.testing.assert_array_equal(again["data/wrist"][:], np.concatenate([e["wrist"] for e in eps]))
    assert psnr(again["data/front"][:], np.concatenate([e["front"] for e in eps])) >= 40
    np.testing.assert_array_equal(again["data/action"][:], np.concatenate([e["action"] for e in eps]))


def test_the_episode_writer_shards_new_cameras_as_asked(tmp_path, natural):
    """``frames_per_shard``: the shard shape in ``zarr.json`` (read as the spec writes it) and the
    files on disk follow it; frames read back through plain zarr; bad values refused at once."""
    store = tmp_path / "rec.zarr"
    rb = ReplayBuffer.create_empty("zarr", store)
    for bad, exc in [(0, ValueError), (2.5, TypeError), (True, TypeError)]:
        with pytest.raises(exc):
            rb.writer(frames="exact", frames_per_shard=bad)
    with rb.writer(frames="exact", frames_per_shard=5) as w:
        w.add_episode({"front": natural[:12], "action": np.zeros((12, 2), np.float32)})
    meta = json.loads((store / "data/front/zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"][0] == 5
    assert meta["codecs"][0]["configuration"]["chunk_shape"][0] == 1
    assert sorted(p.name for p in (store / "data/front/c").iterdir()) == ["0", "1", "2"]
    np.testing.assert_array_equal(zarr.open_group(store, mode="r")["data/front"][:], natural[:12])


def test_frames_on_add_episode_is_refused_before_anything_is_written(tmp_path, natural):
    from replaybuf_core.errors import CapabilityError

    ep = {"front": natural[:4], "action": np.zeros((4, 2), np.float32)}
    rb = ReplayBuffer.create_empty("zarr", tmp_path / "s.zarr")
    for frames, compressors, match in [("action=fast", None, "not camera-frame keys"),
                                       ("front=jpeg:101", None, "quality"),
                                       ({"front": "fast"}, {"front": "disk"}, "both name")]:
        with pytest.raises(ValueError, match=match):
            rb.add_episode(ep, frames=frames, compressors=compressors)
        assert rb.keys() == [] and rb.n_episodes == 0
    with pytest.raises(ValueError, match="unknown frame codec"):
        rb.writer(frames="front=h265")
    rb.add_episode(ep, frames="fast")
    assert rb.get_compressors()["front"] == JpegCodec(quality=95, subsampling="420")  # fast above 96x96 px: 4:2:0
    with pytest.raises(CapabilityError, match="no frame codecs"):
        ReplayBuffer.create_empty("numpy").add_episode(ep, frames="exact")


def test_the_import_report_suggests_webp_for_flat_frames_only(natural):
    from replaybuf_core.importing.report import KeyReport, _flat_frames_hint
    from replaybuf_zarr.frame_choice import zarr_frame_codec

    exact = zarr_frame_codec(parse_frame_choice("exact"))
    sizes = {}
    for name, frames in (("natural", natural[:4]), ("flat", np.full((4, 96, 96, 3), 200, np.uint8))):
        if name == "flat":
            frames[:, 30:60, 20:70] = (20, 90, 200)  # a rendered scene: a few flat shapes
        sizes[name] = np.mean([len(exact.encode_frame(f[None])) for f in frames])
        r = KeyReport(name, frames.shape, "uint8", "uint8", exact.to_dict()["name"] + "(effort=1)", (1,) + frames.shape[1:],
                      None, bytes_per_frame=sizes[name])
        hint = _flat_frames_hint(r)
        assert (hint is not None) == (name == "flat"), (name, sizes[name])
    assert "--frames webp" in _flat_frames_hint(KeyReport("f", (4, 96, 96, 3), "uint8", "uint8",
                                                          "replaybuf.jpegxl(effort=1)", (1, 96, 96, 3), None,
                                                          bytes_per_frame=sizes["flat"]))


def test_frames_for_keys_already_stored_in_another_codec_or_for_no_camera_are_refused(tmp_path, natural):
    rb = ReplayBuffer.create_empty("zarr", tmp_path / "s.zarr")
    ep = {"cam": natural[:3], "action": np.zeros((3, 2), np.float32)}
    with rb.writer(frames="fast") as w:
        w.add_episode(ep)
    n = rb.n_steps
    with pytest.raises(ValueError, match=r"'cam' is stored as JpegCodec.*not jpegxl:1.*set_frames"):
        rb.add_episode(ep, frames="exact")  # would silently store lossy frames under an 'exact' request
    rb.add_episode(ep, frames="fast")  # the codec it has: fine
    assert rb.n_steps == 2 * n
    with pytest.raises(ValueError, match="holds no camera frames"):
        ReplayBuffer.create_empty("zarr", tmp_path / "t.zarr").add_episode(
            {"depth": np.zeros((3, 8, 8, 3), np.float32)}, frames="fast")
