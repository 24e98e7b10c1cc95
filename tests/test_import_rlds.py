"""The ``rlds`` import format: TFRecord framing and CRCs, ``tf.train.Example`` through protobuf, the
TFDS-written fixture value for value, JPEG pass-through, and bad input named (no TensorFlow here:
``tests/data/rlds/make_fixture.py`` wrote the fixture with TFDS in another environment)."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("google.protobuf")

from replaybuf_core import ReplayBuffer, import_dataset  # noqa: E402
from replaybuf_core.formats.rlds import example, tfrecord  # noqa: E402
from replaybuf_core.formats.rlds.features import UnsupportedFeature  # noqa: E402
from replaybuf_core.formats.rlds.source import RldsSource  # noqa: E402
from replaybuf_core.testing.rlds_writer import encode_image, example_bytes, write_rlds  # noqa: E402

@pytest.fixture(autouse=True)
def _index_cache(tmp_path_factory, monkeypatch):
    """Each test its own shard-index cache (subprocesses inherit it), never the user's."""
    monkeypatch.setenv("REPLAYBUF_CACHE", str(tmp_path_factory.mktemp("cache")))


FIXTURE = Path(__file__).parent / "data" / "rlds" / "toy_rlds"
SOURCE = Path(__file__).parent / "data" / "rlds" / "toy_rlds_source.npz"
KEYS = {  # store key -> RLDS feature (the fixture's)
    "action": "steps/action", "action_int": "steps/action_int", "discount": "steps/discount",
    "is_first": "steps/is_first", "is_last": "steps/is_last", "is_terminal": "steps/is_terminal",
    "joint_pos_f64": "steps/joint_pos_f64", "language_instruction": "steps/language_instruction",
    "observation.depth": "steps/observation/depth", "observation.gripper_open": "steps/observation/gripper_open",
    "observation.image": "steps/observation/image", "observation.state": "steps/observation/state",
    "observation.wrist_image": "steps/observation/wrist_image", "reward": "steps/reward",
}


# ------------------------------------------------------------------------------------ framing
def _crc32c_bitwise(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected 0x82F63B78) bit by bit: the simple model."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@given(st.binary(max_size=64))
def test_masked_crc_is_tensorflows_formula(data):
    assert _crc32c_bitwise(b"123456789") == 0xE3069283  # the CRC-32C check value
    crc = _crc32c_bitwise(data)
    assert tfrecord.masked_crc(data) == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_the_framing_reads_tfds_shards_and_round_trips(tmp_path):
    shard = FIXTURE / "1.0.0" / "toy_rlds-train.tfrecord-00001-of-00002"
    records = list(tfrecord.iter_records(shard))
    assert len(records) == 3  # dataset_info.json's shardLengths
    raw = shard.read_bytes()
    pos = 0
    for rec, data in records:  # the layout by hand: u64 length, u32 crc, data, u32 crc
        (length,) = struct.unpack_from("<Q", raw, pos)
        assert (rec.offset, rec.length) == (pos + 12, length) and data == raw[pos + 12:pos + 12 + length]
        pos += 16 + length
    assert pos == len(raw)
    tfrecord.write_records(tmp_path / "again", [d for _, d in records])
    assert (tmp_path / "again").read_bytes() == raw  # our framing is TensorFlow's, byte for byte
    tfrecord.write_records(tmp_path / "again.gz", [d for _, d in records], compress=True)
    assert [d for _, d in tfrecord.iter_records(tmp_path / "again.gz")] == [d for _, d in records]
    reader = tfrecord.RecordReader(tmp_path / "again.gz")
    try:  # backwards and forwards in a gzip file
        for n in (2, 0, 1, 2):
            assert reader.read(n, records[n][0]) == records[n][1]
    finally:
        reader.close()


# ------------------------------------------------------------------------------------ Example
_FEATURE = st.one_of(
    st.tuples(st.just("bytes_list"), st.lists(st.binary(max_size=20), max_size=6)),
    st.tuples(st.just("float_list"), st.lists(st.floats(width=32, allow_nan=False), max_size=6)),
    st.tuples(st.just("int64_list"), st.lists(st.integers(-(2 ** 63), 2 ** 63 - 1), max_size=6)),
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), _FEATURE, max_size=6), st.booleans())
def test_the_scan_counts_what_protobuf_parses(features, unpacked):
    """scan_counts (the index: no values parsed) against protobuf's parse of the same bytes, packed
    and unpacked lists alike, and the Feature spans it gives parse to the same values."""
    ex = example.example_class()()
    for key, (kind, values) in features.items():
        getattr(ex.features.feature[key], kind).value.extend(values)
    data = ex.SerializeToString()
    if unpacked:  # the same lists, not packed (TensorFlow reads both)
        data = _unpacked(features)
    counts = example.scan_counts(data)
    parsed = example.parse_example(data, "here").features.feature
    assert set(counts) == set(parsed)
    feature_cls = example.messages()[1]
    for key, f in parsed.items():
        kind, values = example.feature_values(f)
        assert counts[key][:2] == (kind, len(values))
        again = example.feature_values(feature_cls.FromString(data[counts[key][2]:counts[key][3]]))
        assert again[0] == kind and list(again[1]) == list(values)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while True:
        if n < 0x80:
            return out + bytes([n])
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7


def _unpacked(features) -> bytes:
    def ld(field: int, payload: bytes) -> bytes:
        return _varint(field << 3 | 2) + _varint(len(payload)) + payload

    entries = b""
    for key, (kind, values) in features.items():
        if kind == "bytes_list":
            lst = b"".join(ld(1, v) for v in values)
        elif kind == "float_list":
            lst = b"".join(b"\x0d" + struct.pack("<f", v) for v in values)
        else:
            lst = b"".join(b"\x08" + _varint(v) for v in values)
        number = {"bytes_list": 1, "float_list": 2, "int64_list": 3}[kind]
        entries += ld(1, ld(1, key.encode()) + ld(2, ld(number, lst)))
    return ld(1, entries)


# ------------------------------------------------------------------------------------ the TFDS fixture
def _store_episodes(dst):
    rb = ReplayBuffer.create_from_path(dst)
    ends = np.asarray(rb.episode_ends[:])
    starts = np.concatenate([[0], ends[:-1]])
    data = {k: rb[k][:] for k in rb.keys()}
    attrs = [json.loads(a) for a in rb.store.read("meta", "episode_attrs", 0, len(ends))]
    out = [{k: v[a:b] for k, v in data.items()} for a, b in zip(starts, ends)]
    root_attrs = rb.store.get_attrs("data")
    rb.close()
    return out, attrs, root_attrs


@pytest.mark.parametrize("split", ["train", "val"])
def test_the_tfds_fixture_imports_value_for_value(tmp_path, split):
    """Every value of every episode against the arrays TFDS built the shards from (JPEG: TensorFlow's
    accurate-IDCT decode, TFDS's own decode within its fast IDCT's error), in TFDS's reading order."""
    src = np.load(SOURCE)
    report = import_dataset(FIXTURE, tmp_path / "o.zarr", "rlds", format_options={"split": split}, progress=False)
    assert report.ok, report.problems
    episodes, attrs, root = _store_episodes(tmp_path / "o.zarr")
    order = list(src[f"tfds_order/{split}"])
    assert [a["episode_metadata"]["episode_id"] % 100 for a in attrs] == order
    assert len(episodes) == len(order)
    for got, i, a in zip(episodes, order, attrs):
        for key, feature in KEYS.items():
            want = src[f"{split}/{i}/{feature}"]
            if key == "observation.image":
                assert np.array_equal(got[key], src[f"tf_accurate_decoded/{split}/{i}/{feature}"])
                assert np.abs(got[key].astype(int) - src[f"tfds_decoded/{split}/{i}/{feature}"]).max() <= 16
                assert np.abs(got[key].astype(int) - want).mean() < 8  # the lossy JPEG of the source arrays
            elif key == "joint_pos_f64":  # a tf.train.Example holds float32 (as TFDS reads it)
                assert got[key].dtype == np.float64 and np.array_equal(got[key], want.astype(np.float32))
            elif key == "language_instruction":
                assert list(got[key]) == [str(s) for s in want]
            else:
                assert got[key].dtype == want.dtype and np.array_equal(got[key], want), key
        assert a["episode_metadata"]["file_path"] == str(src[f"{split}/{i}/episode_metadata/file_path"])
        assert a["tasks"] == list(dict.fromkeys(t for t in src[f"{split}/{i}/steps/language_instruction"] if t))
    assert root["source_attrs"]["split"] == split
    assert f"split {split!r} ({len(order)} episodes; the dataset's splits: train, val)" in report.summary()
    tasks = list(root["source_attrs"]["tasks"].values())
    assert set(tasks) == {t for a in attrs for t in a["tasks"]}


def test_gzip_shards_import_as_the_plain_ones(tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURE / "1.0.0", plain)
    for shard in plain.glob("*.tfrecord-*"):  # TFDS writes no gzip: its shards gzipped, as tf.data reads them
        shard.write_bytes(gzip.compress(shard.read_bytes()))
    assert import_dataset(FIXTURE, tmp_path / "a.zarr", "rlds", progress=False).ok
    assert import_dataset(plain, tmp_path / "b.zarr", "rlds", progress=False).ok
    a, b = _store_episodes(tmp_path / "a.zarr")[0], _store_episodes(tmp_path / "b.zarr")[0]
    assert len(a) == len(b) == 5
    for x, y in zip(a, b):
        assert all(np.array_equal(x[k], y[k]) for k in x)


def test_a_jpeg_camera_keeps_the_sources_bytes_with_a_jpeg_codec(tmp_path):
    """With --frames fast the JPEG camera stores the shards' own JPEG bytes (found verbatim in the
    stored files), read back bit for bit as their decode; the PNG camera is encoded (lossy, by PSNR)."""
    report = import_dataset(FIXTURE, tmp_path / "o.zarr", "rlds", frames="fast", progress=False)
    assert report.ok, report.problems
    assert report.keys["observation.image"].exact is True
    assert "passed through" in report.frame_handling["observation.image"]
    stored = b"".join(p.read_bytes() for p in (tmp_path / "o.zarr" / "data" / "observation.image").rglob("*")
                      if p.is_file() and p.name != "zarr.json")
    jpegs = [v for shard in sorted((FIXTURE / "1.0.0").glob("*-train.*"))
             for _, data in tfrecord.iter_records(shard)
             for v in example.feature_values(example.parse_example(data, "x").features.feature[
                 "steps/observation/image"])[1]]
    assert len(jpegs) == 23 and all(j in stored for j in jpegs)
    again = import_dataset(FIXTURE, tmp_path / "r.zarr", "rlds", frames="fast", progress=False,
                           format_options={"jpeg": "reencode"})
    assert again.ok and again.keys["observation.image"].exact is not True  # encoded again: checked by PSNR
    stored = b"".join(p.read_bytes() for p in (tmp_path / "r.zarr" / "data" / "observation.image").rglob("*")
                      if p.is_file())
    assert not any(j in stored for j in jpegs)


def test_the_cli_lists_and_guesses_the_format(tmp_path):
    r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "formats"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "rlds" in r.stdout
    r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "import", str(FIXTURE), str(tmp_path / "o.zarr"),
                        "--no-progress", "--split", "val"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "(rlds)" in r.stdout and "2 episodes, 6 steps" in r.stdout


# ------------------------------------------------------------------------------------ hand-built streams
FEATURES = {
    "steps/is_first": ("tensor", np.bool_, ()),
    "steps/is_last": ("tensor", np.bool_, ()),
    "steps/action": ("tensor", np.float32, (3,)),
    "steps/observation/cam": ("image", np.uint8, (8, 10, 3), "png"),
    "steps/observation/joints": ("tensor", np.float64, (2,), "bytes"),
    "steps/observation/packed": ("tensor", np.int16, (2, 2), "zlib"),
    "steps/observation/flags": ("tensor", np.uint64, ()),
    "steps/language_instruction": ("text",),
    "steps/extra": ("tensor", np.int32, (), "none", True),  # optional
    "episode_metadata/name": ("text",),
}


def _episode(i: int, t: int, texts=None, extra=True) -> dict:
    rng = np.random.default_rng(i)
    ep = {
        "steps/is_first": np.arange(t) == 0, "steps/is_last": np.arange(t) == t - 1,
        "steps/action": rng.normal(size=(t, 3)).astype(np.float32),
        "steps/observation/cam": rng.integers(0, 256, (t, 8, 10, 3), dtype=np.uint8),
        "steps/observation/joints": rng.normal(size=(t, 2)),
        "steps/observation/packed": rng.integers(-3000, 3000, (t, 2, 2), dtype=np.int16),
        "steps/observation/flags": rng.integers(0, 2 ** 64 - 1, t, dtype=np.uint64),
        "steps/language_instruction": texts if texts is not None else ["go"] * t,
        "episode_metadata/name": f"episode {i}",
    }
    if extra:
        ep["steps/extra"] = rng.integers(-5, 5, t).astype(np.int32)
    return ep


def test_odd_episodes_import_exactly(tmp_path):
    """One step, ragged language (lengths, empty, non-ASCII), an absent optional feature (TFDS's
    default), bytes- and zlib-encoded tensors, uint64, gzip, and an empty episode (refused unless
    dropped)."""
    eps = [_episode(0, 1), _episode(1, 4, ["", "ein längerer Satz ✓", "x", "x"], extra=False), _episode(2, 0),
           _episode(3, 3)]
    root = write_rlds(tmp_path / "ds", FEATURES, eps, shards=2, compress=True)
    with pytest.raises(ValueError, match=r"episode\(s\) 2 of 4 have zero length"):
        import_dataset(root, tmp_path / "o.zarr", "rlds", progress=False)
    assert not (tmp_path / "o.zarr").exists()
    report = import_dataset(root, tmp_path / "o.zarr", "rlds", progress=False, drop_empty_episodes=True)
    assert report.ok, report.problems
    got, attrs, _ = _store_episodes(tmp_path / "o.zarr")
    assert [a["episode_metadata"]["name"] for a in attrs] == ["episode 0", "episode 1", "episode 3"]
    for g, ep in zip(got, [eps[0], eps[1], eps[3]]):
        for path, want in ep.items():
            if path.startswith("episode_metadata"):
                continue
            key = path.split("/", 1)[1].replace("/", ".")
            if path == "steps/language_instruction":
                assert list(g[key]) == list(want)
            elif path == "steps/action":
                assert np.array_equal(g[key], want)
            else:
                assert g[key].dtype == np.asarray(want).dtype and np.array_equal(g[key], want), key
    assert np.array_equal(got[1]["extra"], np.full(4, np.iinfo(np.int32).min, np.int32))  # absent: TFDS's default
    assert attrs[1]["tasks"] == ["ein längerer Satz ✓", "x"]


def _two_shards(tmp_path, n=4):
    eps = [_episode(i, 2 + i) for i in range(n)]
    return write_rlds(tmp_path / "ds", FEATURES, eps, shards=2), eps


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "import", *map(str, args), "--no-progress"],
                          capture_output=True, text=True, timeout=300)


def _damage_and_check(tmp_path, root, message, skipped):
    """The import refuses the damaged dataset by name, leaves nothing; --skip-bad-episodes imports
    the rest and reports what it left out."""
    r = _cli("rlds", root, tmp_path / "o.zarr")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "o.zarr").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    r = _cli("rlds", root, tmp_path / "o.zarr", "--skip-bad-episodes")
    assert r.returncode == 0, r.stderr
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    assert list(rb.store.read("meta", "source_episode_index", 0, rb.n_episodes)) == [
        i for i in range(4) if i not in skipped]
    rb.close()
    report = json.loads(json.dumps(ReplayBuffer.create_from_path(tmp_path / "o.zarr").store.get_attrs("data")))
    assert [s["episode"] for s in report["import"]["skipped_episodes"]] == skipped
    assert "skipped" in r.stdout.lower() or "left out" in r.stdout.lower()


def test_a_crc_mismatch_is_named(tmp_path):
    root, _ = _two_shards(tmp_path)
    shard = root / "toy-train.tfrecord-00001-of-00002"  # episodes 2, 3
    raw = bytearray(shard.read_bytes())
    first = struct.unpack_from("<Q", raw, 0)[0]
    raw[16 + first + 12 + 5] ^= 0x40  # a byte of record 1's data
    shard.write_bytes(bytes(raw))
    _damage_and_check(tmp_path, root, f"{shard}: record 1 (byte {16 + first}): the CRC of the record's", [3])


def test_a_truncated_shard_is_named(tmp_path):
    root, _ = _two_shards(tmp_path)
    shard = root / "toy-train.tfrecord-00000-of-00002"  # episodes 0, 1
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-30])
    _damage_and_check(tmp_path, root, f"{shard}: record 1", [1])


def test_a_damaged_length_loses_the_rest_of_its_shard_by_name(tmp_path):
    root, _ = _two_shards(tmp_path)
    shard = root / "toy-train.tfrecord-00000-of-00002"
    raw = bytearray(shard.read_bytes())
    raw[2] ^= 1  # record 0's length: its CRC fails, record 1 cannot be found
    shard.write_bytes(bytes(raw))
    _damage_and_check(tmp_path, root, "the CRC of the record's length does not match", [0, 1])


def test_an_absent_shard_is_named(tmp_path):
    root, _ = _two_shards(tmp_path)
    (root / "toy-train.tfrecord-00001-of-00002").unlink()
    _damage_and_check(tmp_path, root, "toy-train.tfrecord-00001-of-00002: the shard is listed in dataset_info.json "
                                      "but absent", [2, 3])


def test_step_counts_that_disagree_are_named(tmp_path):
    eps = [_episode(i, 3) for i in range(4)]
    eps[1]["steps/action"] = eps[1]["steps/action"][:2]
    root = write_rlds(tmp_path / "ds", FEATURES, eps, shards=2)
    _damage_and_check(tmp_path, root, "step counts disagree: steps/is_first has 3 steps, steps/action holds 6 values",
                      [1])


def test_a_missing_required_feature_is_named(tmp_path):
    eps = [_episode(i, 3) for i in range(4)]
    del eps[2]["steps/observation/cam"]
    root = write_rlds(tmp_path / "ds", FEATURES, eps, shards=2)
    _damage_and_check(tmp_path, root, "record 0: the Example lacks feature steps/observation/cam", [2])


@pytest.mark.parametrize("entry, message", [
    ({"pythonClassName": "tensorflow_datasets.core.features.video_feature.Video", "video": {}},
     "steps/observation/weird: a feature of type Video (video)"),
    ({"pythonClassName": "x.Sequence", "sequence": {"feature": {"tensor": {"dtype": "int32", "shape": {}}}}},
     "steps/observation/weird: a Sequence inside the steps"),
    ({"pythonClassName": "x.Tensor", "tensor": {"dtype": "complex64", "shape": {}}},
     "steps/observation/weird: Tensor of dtype 'complex64'"),
    ({"pythonClassName": "x.Tensor", "tensor": {"dtype": "float32", "shape": {"dimensions": ["-1"]}}},
     "steps/observation/weird: Tensor of shape (-1,)"),
])
def test_a_feature_the_reader_does_not_understand_is_named(tmp_path, entry, message):
    root, _ = _two_shards(tmp_path)
    doc = json.loads((root / "features.json").read_text())
    steps = doc["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]
    steps["observation"]["featuresDict"]["features"]["weird"] = entry
    (root / "features.json").write_text(json.dumps(doc))
    with pytest.raises(UnsupportedFeature, match=message.replace("(", r"\(").replace(")", r"\)")):
        RldsSource(root)
    r = _cli("rlds", root, tmp_path / "o.zarr")
    assert r.returncode == 2 and message in r.stderr and not (tmp_path / "o.zarr").exists()


def test_splits_and_versions_are_found_and_named(tmp_path):
    root, _ = _two_shards(tmp_path)
    version = tmp_path / "toy" / "1.0.0"
    version.parent.mkdir()
    shutil.move(root, version)
    assert RldsSource(tmp_path / "toy", progress=False).n_episodes == 4  # <name>/<version> found
    with pytest.raises(ValueError, match=r"no split 'test'; its splits are \['train'\]"):
        RldsSource(version, split="test")
    assert RldsSource(version, progress=False).split == "train"


def test_without_protobuf_the_message_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_protobuf(name, *args, **kwargs):
        if name.startswith("google.protobuf"):
            raise ImportError("no protobuf")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_protobuf)
    example.messages.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install 'replaybuf\[rlds\]'.*TensorFlow is not needed"):
            example.messages()
    finally:
        monkeypatch.undo()
        example.messages.cache_clear()


def test_no_tensorflow_is_imported(tmp_path):
    code = ("import sys; from replaybuf_core import import_dataset; "
            f"assert import_dataset({str(FIXTURE)!r}, {str(tmp_path / 'o.zarr')!r}, 'rlds', progress=False).ok; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_datasets')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


def test_example_bytes_is_what_the_fixture_holds():
    """The tests' writer encodes an episode as TFDS did (the fixture's first record, key by key)."""
    shard = FIXTURE / "1.0.0" / "toy_rlds-train.tfrecord-00000-of-00002"
    data = next(tfrecord.iter_records(shard))[1]
    ex = example.parse_example(data, "x").features.feature
    spec = {"steps/action": ("tensor", np.float32, (7,)), "steps/is_first": ("tensor", np.bool_, ()),
            "steps/action_int": ("tensor", np.int64, (2,)), "steps/language_instruction": ("text",)}
    mine = {k: [example.feature_values(ex[k])[1][i] for i in range(len(example.feature_values(ex[k])[1]))]
            for k in spec}
    mine["steps/language_instruction"] = [b.decode() for b in mine["steps/language_instruction"]]
    again = example.parse_example(example_bytes(spec, mine), "y").features.feature
    for k in spec:
        assert again[k].SerializeToString() == ex[k].SerializeToString()


# ------------------------------------------------------------------------------------ the index, Dask
def test_a_shard_is_read_once_then_its_index_is_cached(tmp_path, monkeypatch):
    """The second open reads no record (a Dask worker, an import started again); a shard that changed
    is indexed again; index_cache=False reads every time."""
    from replaybuf_core.formats.rlds import source as source_module

    root, _ = _two_shards(tmp_path)
    first = RldsSource(root)
    reads = []
    real = source_module.iter_records
    monkeypatch.setattr(source_module, "iter_records", lambda p: reads.append(Path(p).name) or real(p))
    again = RldsSource(root)
    assert reads == []
    assert list(again.episode_lengths) == list(first.episode_lengths) and again.episode_attrs(3) == first.episode_attrs(3)
    for i in range(4):
        a, b = first.read_episode(i), again.read_episode(i)
        assert all(np.array_equal(a[k], b[k]) for k in a)
    shard = root / "toy-train.tfrecord-00001-of-00002"
    shard.write_bytes(shard.read_bytes())  # touched: a new modification time
    import os
    os.utime(shard, ns=(1, 1))
    RldsSource(root)
    assert reads == [shard.name]
    RldsSource(root, index_cache=False)
    assert sorted(reads[1:]) == sorted(p.name for p in root.glob("*.tfrecord-*"))


def test_a_keys_bytes_alone_give_its_rows(tmp_path):
    """read_pieces (a Dask task: one key's feature bytes, no whole record) equals read_rows."""
    root, eps = _two_shards(tmp_path)
    src = RldsSource(root)
    for key in src.keys:
        pieces = [(0, 0, 2), (1, 1, 3), (2, 0, 4), (3, 2, 5)]
        got = src.read_pieces(key, pieces)
        for (i, a, b), g in zip(pieces, got):
            want = src.read_rows(i, [key], a, b)[key]
            assert g.dtype == want.dtype and g.shape == want.shape and (g == want).all(), key


def test_on_a_dask_cluster_the_import_is_the_serial_one(client, tmp_path):
    """Many shards on two workers: the store equals the serial import's, file for file."""
    from replaybuf_core.testing.files import file_digests

    eps = [_episode(i, 3 + i % 5) for i in range(24)]
    root = write_rlds(tmp_path / "ds", FEATURES, eps, shards=6)
    assert import_dataset(root, tmp_path / "serial.zarr", "rlds", progress=False).ok
    cache = {"index_cache": str(tmp_path / "cache")}  # the workers' processes: not the user's cache either
    report = import_dataset(root, tmp_path / "dask.zarr", "rlds", progress=False, client=client, format_options=cache)
    assert report.ok, report.problems
    a, b = file_digests(tmp_path / "serial.zarr"), file_digests(tmp_path / "dask.zarr")
    assert sorted(a) == sorted(b) and [p for p in a if a[p] != b[p]] == []
    # the TFDS fixture's JPEG camera passed through on the cluster too: the serial import's bytes
    fast = {"frames": "fast", "progress": False, "format_options": cache}
    assert import_dataset(FIXTURE, tmp_path / "fs.zarr", "rlds", **fast).ok
    report = import_dataset(FIXTURE, tmp_path / "fd.zarr", "rlds", client=client, **fast)
    assert report.ok and report.keys["observation.image"].exact is True, report.problems
    a, b = file_digests(tmp_path / "fs.zarr"), file_digests(tmp_path / "fd.zarr")
    assert [p for p in a if "observation.image" in p and a[p] != b.get(p)] == []


def test_an_image_that_does_not_decode_is_named_and_nothing_is_left(tmp_path):
    """Found while reading (the index counts values, it decodes none): the import fails naming the
    file, record, feature and step, and removes what it built."""
    eps = [_episode(i, 3) for i in range(2)]
    eps[1]["steps/observation/cam"] = [b"\xff\xd8 not a jpeg"] + [encode_image(f, "png")
                                                                  for f in eps[1]["steps/observation/cam"][1:]]
    root = write_rlds(tmp_path / "ds", FEATURES, eps)
    with pytest.raises(ValueError, match=r"toy-train.tfrecord-00000-of-00001: record 1 \(episode 1\): "
                                         r"steps/observation/cam, step 0: the image does not decode"):
        import_dataset(root, tmp_path / "o.zarr", "rlds", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


_SPEC = st.sampled_from([("tensor", np.float32, (2,)), ("tensor", np.int8, ()), ("tensor", np.bool_, (3,)),
                         ("tensor", np.uint64, ()), ("tensor", np.float64, (2, 2), "bytes"),
                         ("tensor", np.int32, (2,), "zlib"), ("text",), ("image", np.uint8, (4, 6, 1), "png"),
                         ("image", np.uint16, (3, 5, 1), "png")])


def _values(spec, t, rng):
    if spec[0] == "text":
        return ["".join(chr(c) for c in rng.integers(32, 0x2FF, rng.integers(0, 6))) for _ in range(t)]
    dtype, shape = np.dtype(spec[1]), (t,) + tuple(spec[2])
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        return rng.normal(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@settings(max_examples=15, deadline=None)
@given(st.lists(_SPEC, min_size=1, max_size=4), st.lists(st.integers(0, 5), min_size=1, max_size=4),
       st.integers(1, 3), st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_any_dataset_reads_back_as_written(tmp_path_factory, specs, lengths, shards, compress, seed):
    """Random features, episode lengths, shards and gzip: every episode reads back as the simple model
    (the arrays written) says, float32 where the Example holds float32."""
    rng = np.random.default_rng(seed)
    features = {"steps/is_first": ("tensor", np.bool_, ())}
    features.update({f"steps/f{i}": spec for i, spec in enumerate(specs)})
    eps = [{k: (np.arange(t) == 0 if k == "steps/is_first" else _values(spec, t, rng)) for k, spec in features.items()}
           for t in lengths]
    root = write_rlds(tmp_path_factory.mktemp("ds"), features, eps, shards=min(shards, len(eps)), compress=compress)
    src = RldsSource(root, index_cache=False, progress=False)
    assert list(src.episode_lengths) == lengths
    for i, ep in enumerate(eps):
        got = src.read_episode(i)
        for path, want in ep.items():
            key = path.split("/", 1)[1]
            if features[path][0] == "text":
                assert list(got[key]) == list(want)
            else:
                want = np.asarray(want)
                assert got[key].dtype == want.dtype and got[key].shape == want.shape
                assert np.array_equal(got[key], want), (key, got[key], want)


@pytest.mark.parametrize("compress", [False, True])
def test_threads_reading_one_source_from_different_shards_get_their_own_records(tmp_path, compress):
    """A Dask worker runs several tasks on one source object at once.  Its readers were shared: the
    source kept one open shard, so a thread opening another shard closed the file a second thread was
    reading ("the file ends inside the feature"), or a gzip stream's position moved under it.  Each
    thread now has its own; every episode read on 4 threads at once equals the same read alone."""
    import threading

    eps = [_episode(i, 3 + i % 5) for i in range(12)]
    root = write_rlds(tmp_path / "ds", FEATURES, eps, shards=6, compress=compress)
    src = RldsSource(root, progress=False)
    alone = [src.read_episode(i) for i in range(len(eps))]
    errors, mismatches = [], []

    def reader(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(eps)), 6))
        try:
            for i in order.tolist():
                got = src.read_episode(i)
                if any(not np.array_equal(got[k], alone[i][k]) for k in got):
                    mismatches.append(i)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == [] and mismatches == []
    src.close()
    again = src.read_episode(0)  # a reader used after close reopens its file
    assert all(np.array_equal(again[k], alone[0][k]) for k in alone[0])
