"""Tests for replaybuf_zarr.sharding and for WebP image arrays stored in zarr v3 shards."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from replaybuf_zarr.codecs import WebPCodec
from replaybuf_zarr.sharding import (
    DEFAULT_IMAGE_FRAMES_PER_SHARD,
    get_image_shard_shape,
    validate_image_frames_per_shard,
)

from shared_data import PUSHT
N_FRAMES = 600  # > 2 shards of 256 frames, last one partial
CHUNKS = (1, 96, 96, 3)


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    """First N_FRAMES PushT frames as uint8 (T, 96, 96, 3) (source is float32 with integer values)."""
    if not PUSHT.exists():
        pytest.skip(f"{PUSHT} not available")
    src = zarr.open_group(str(PUSHT), mode="r")["data/img"][:N_FRAMES]
    assert np.all(src == np.round(src)) and src.min() >= 0 and src.max() <= 255
    return src.astype(np.uint8)


def create_image_array(root: Path, name: str, n_frames: int, frames_per_shard, *, lossless: bool):
    shards = (
        None
        if validate_image_frames_per_shard(frames_per_shard) is None
        else get_image_shard_shape(CHUNKS, frames_per_shard)
    )
    return zarr.create_array(
        LocalStore(root),
        name=name,
        shape=(n_frames, *CHUNKS[1:]),
        chunks=CHUNKS,
        shards=shards,
        dtype="uint8",
        serializer=WebPCodec(level=99, lossless=lossless),
        compressors=None,
    )


def stored_chunk_objects(root: Path, name: str) -> list[Path]:
    """Files under <array>/c/ (default chunk key encoding): one per chunk or per shard."""
    return [p for p in (root / name / "c").rglob("*") if p.is_file()]


# --------------------------------------------------------------------------- helpers


def test_default_frames_per_shard():
    assert DEFAULT_IMAGE_FRAMES_PER_SHARD == 256
    assert validate_image_frames_per_shard(DEFAULT_IMAGE_FRAMES_PER_SHARD) == 256


@pytest.mark.parametrize("n", [1, 7, 256, np.int64(256), np.uint16(3), np.int8(1)])
def test_validate_accepts_integers(n):
    out = validate_image_frames_per_shard(n)
    assert out == int(n) and type(out) is int


def test_validate_none_means_no_sharding():
    assert validate_image_frames_per_shard(None) is None


@pytest.mark.parametrize("n", [True, False, np.bool_(True), 256.0, np.float64(256), "256", [256], 2.5])
def test_validate_rejects_non_integers(n):
    with pytest.raises(TypeError, match="frames per shard must be an int"):
        validate_image_frames_per_shard(n)


@pytest.mark.parametrize("n", [0, -1, np.int32(-256)])
def test_validate_rejects_non_positive(n):
    with pytest.raises(ValueError, match=str(int(n))):
        validate_image_frames_per_shard(n)


def test_shard_shape():
    assert get_image_shard_shape((1, 96, 96, 3), 256) == (256, 96, 96, 3)
    assert get_image_shard_shape([1, 64, 48], np.int64(10)) == (10, 64, 48)
    assert get_image_shard_shape((4, 8, 8, 1), 12) == (12, 8, 8, 1)
    assert all(type(s) is int for s in get_image_shard_shape((np.int64(1), np.int64(5)), 3))


def test_shard_shape_not_multiple():
    with pytest.raises(ValueError, match=r"\(250\).*\(4,"):
        get_image_shard_shape((4, 96, 96, 3), 250)


@pytest.mark.parametrize(
    ("n", "exc"), [(0, ValueError), (-4, ValueError), (2.0, TypeError), (True, TypeError), (None, TypeError)]
)
def test_shard_shape_bad_n(n, exc):
    with pytest.raises(exc):
        get_image_shard_shape((1, 96, 96, 3), n)


@pytest.mark.parametrize("chunks", [(), (0, 8, 8, 3), (-1, 8)])
def test_shard_shape_bad_chunks(chunks):
    with pytest.raises(ValueError, match="image_chunks"):
        get_image_shard_shape(chunks, 4)


# --------------------------------------------------------------------------- sharded WebP arrays


def test_sharded_matches_unsharded_and_object_count(frames, tmp_path):
    n = DEFAULT_IMAGE_FRAMES_PER_SHARD
    plain = create_image_array(tmp_path, "plain", len(frames), None, lossless=False)
    sharded = create_image_array(tmp_path, "sharded", len(frames), n, lossless=False)
    plain[:] = frames
    sharded[:] = frames

    a, b = plain[:], sharded[:]
    np.testing.assert_array_equal(a, b)  # same codec, same frames -> same pixels
    assert a.shape == frames.shape and a.dtype == np.uint8

    assert len(stored_chunk_objects(tmp_path, "plain")) == len(frames)
    assert len(stored_chunk_objects(tmp_path, "sharded")) == math.ceil(len(frames) / n)  # 3

    meta = sharded.metadata.to_dict()["codecs"][0]
    assert meta["name"] == "sharding_indexed"
    assert list(meta["configuration"]["chunk_shape"]) == list(CHUNKS)
    assert meta["configuration"]["codecs"][0] == {
        "name": "replaybuf.webp",
        "configuration": {"level": 99, "lossless": False},
    }


def test_shard_boundary_slice_and_reopen(frames, tmp_path):
    arr = create_image_array(tmp_path, "img", len(frames), 256, lossless=True)
    arr[:] = frames
    reopened = zarr.open_array(LocalStore(tmp_path), path="img", mode="r")
    np.testing.assert_array_equal(reopened[250:262], frames[250:262])
    np.testing.assert_array_equal(reopened[510:514], frames[510:514])
    np.testing.assert_array_equal(reopened[255], frames[255])
    np.testing.assert_array_equal(reopened[256], frames[256])
    np.testing.assert_array_equal(reopened[::97], frames[::97])
    np.testing.assert_array_equal(reopened[:], frames)


def test_partial_writes_into_shards(frames, tmp_path):
    arr = create_image_array(tmp_path, "img", 300, 256, lossless=True)
    arr[250:262] = frames[:12]  # one write spanning two shards
    arr[0:3] = frames[100:103]
    expected = np.zeros((300, *CHUNKS[1:]), np.uint8)
    expected[250:262] = frames[:12]
    expected[0:3] = frames[100:103]
    np.testing.assert_array_equal(arr[:], expected)
    assert len(stored_chunk_objects(tmp_path, "img")) == 2


def test_append_to_sharded_array(frames, tmp_path):
    first, total = 400, len(frames)
    arr = create_image_array(tmp_path, "img", first, 256, lossless=True)
    arr[:] = frames[:first]
    assert len(stored_chunk_objects(tmp_path, "img")) == 2

    arr.resize((total, *CHUNKS[1:]))  # append: grow axis 0, then write the new rows
    arr[first:total] = frames[first:total]

    reopened = zarr.open_array(LocalStore(tmp_path), path="img", mode="r")
    assert reopened.shape == frames.shape
    np.testing.assert_array_equal(reopened[:], frames)
    np.testing.assert_array_equal(reopened[first - 5 : first + 5], frames[first - 5 : first + 5])
    assert len(stored_chunk_objects(tmp_path, "img")) == math.ceil(total / 256)

    # a second append that starts a brand-new shard
    arr.resize((total + 20, *CHUNKS[1:]))
    arr[total:] = frames[:20]
    np.testing.assert_array_equal(arr[total - 2 :], np.concatenate([frames[-2:], frames[:20]]))
    assert len(stored_chunk_objects(tmp_path, "img")) == math.ceil((total + 20) / 256)


def test_sharded_gray_and_rgba(tmp_path):
    rng = np.random.default_rng(3)
    for name, shape in (("gray", (10, 12, 16)), ("rgba", (10, 12, 16, 4))):
        x = rng.integers(0, 256, shape, dtype=np.uint8)
        arr = zarr.create_array(
            LocalStore(tmp_path), name=name, shape=shape, chunks=(1, *shape[1:]),
            shards=get_image_shard_shape((1, *shape[1:]), 4), dtype="uint8",
            serializer=WebPCodec(lossless=True), compressors=None,
        )
        arr[:] = x
        np.testing.assert_array_equal(arr[:], x)
        np.testing.assert_array_equal(arr[3:6], x[3:6])
        assert len(stored_chunk_objects(tmp_path, name)) == 3
