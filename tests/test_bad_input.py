"""The bad-input corpus: every malformed input is rejected with a specific exception whose message names
the key / episode / index, and leaves the buffer (and the store on disk) unchanged.

Buffer-level cases are one parametrised table (one test body); the episode cases reuse the
conformance suite's table (``replaybuf_core.testing.refusal_conformance._bad_episodes``) with the message each
must carry.  Store-level cases (damaged files) are a second table checked at open / verify time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.testing import assert_buffer_equal, make_episode
from replaybuf_core.testing.refusal_conformance import _bad_episodes
from replaybuf_core.testing.data import assert_snapshot_equal, snapshot

#: message each conformance bad episode must carry (key / episode named)
EPISODE_MATCH = {
    "ragged": r"'obs' has 3 steps, 'action' has 2",
    "zero-d": r"'action'.*0-d",
    "empty-dict": r"empty dict",
    "zero-length": r"zero-length",
    "trailing-shape": r"'obs'.*step shape \(4,\)",
    "trailing-rank": r"'obs'.*step shape \(3, 1\)",
    "dtype-kind-float-to-int": r"'action'.*float64.*int64",
    "dtype-str-to-float": r"'obs'.*dtype",
    "missing-key": r"episode 3.*missing \['action'\]",
    "extra-key": r"episode 3.*extra \['extra'\]",
    "object-non-str": r"'o'.*only str.*int",
    "empty-key": r"''.*non-empty",
    "slash-key": r"'a/b'.*'/'",
    "non-str-key": r"must be a str.*1",
    "not-a-mapping": r"dict of arrays.*list",
    "datetime": r"'t'.*datetime64",
}
BAD_EPISODES = {name: (ep, exc) for name, ep, exc in _bad_episodes()}
assert set(EPISODE_MATCH) == set(BAD_EPISODES)


def _ep(n=3, seed=11):
    return make_episode(n, seed)


# (id, fixture "filled" | "empty", call(buffer), exception, message regex)
CASES = [(f"episode-{name}", "filled", (lambda b, ep=ep: b.add_episode(ep)), exc, EPISODE_MATCH[name])
         for name, (ep, exc) in BAD_EPISODES.items()]
CASES += [
    # first episode of an empty buffer: chunks for new keys
    ("chunks-rank", "empty", lambda b: b.add_episode(_ep(), chunks={"obs": (2,)}), ValueError, r"rank|dim"),
    ("chunks-zero", "empty", lambda b: b.add_episode(_ep(), chunks={"obs": (0, 3)}), ValueError, r"0"),
    ("chunks-negative", "empty", lambda b: b.add_episode(_ep(), chunks={"obs": (-2, 3)}), ValueError, r"-2"),
    ("chunks-float", "empty", lambda b: b.add_episode(_ep(), chunks={"obs": (2.0, 3)}), TypeError, r"2\.0"),
    ("chunks-bool", "empty", lambda b: b.add_episode(_ep(), chunks={"obs": (True, 3)}), TypeError, r"True"),
    ("chunks-unknown-key", "empty", lambda b: b.add_episode(_ep(), chunks={"nope": (2,)}), KeyError, r"'nope'"),
    ("compressor-unknown", "empty", lambda b: b.add_episode(_ep(), compressors={"obs": "zip9"}), ValueError,
     r"unknown compressor name 'zip9'"),
    ("compressor-number", "empty", lambda b: b.add_episode(_ep(), compressors={"obs": 3}), TypeError, r"3"),
    ("first-episode-ragged", "empty", lambda b: b.add_episode({"a": np.zeros(2), "b": np.zeros(3)}), ValueError,
     r"'a' has 2 steps, 'b' has 3"),
    # set_chunks / set_compressors
    ("set-chunks-rank", "filled", lambda b: b.set_chunks({"obs": (2,)}), ValueError, r"rank|dim"),
    ("set-chunks-zero", "filled", lambda b: b.set_chunks({"action": (0,)}), ValueError, r"0"),
    ("set-chunks-float", "filled", lambda b: b.set_chunks({"action": (2.5,)}), TypeError, r"2\.5"),
    ("set-chunks-unknown-key", "filled", lambda b: b.set_chunks({"nope": (2,)}), KeyError, r"'nope'"),
    ("set-compressors-unknown", "filled", lambda b: b.set_compressors({"obs": "nonexistent"}), ValueError,
     r"'nonexistent'"),
    ("set-compressors-unknown-key", "filled", lambda b: b.set_compressors({"nope": "disk"}), KeyError, r"'nope'"),
    # episode indices
    ("index-out-of-range", "filled", lambda b: b.get_episode(3), IndexError, r"index 3.*3 episodes"),
    ("index-negative-out-of-range", "filled", lambda b: b.get_episode(-4), IndexError, r"-4.*3 episodes"),
    ("index-float", "filled", lambda b: b.get_episode(1.0), TypeError, r"float 1\.0"),
    ("index-str", "filled", lambda b: b.get_episode("0"), TypeError, r"str '0'"),
    ("index-bool", "filled", lambda b: b.get_episode(True), TypeError, r"bool"),
    ("index-numpy-float", "filled", lambda b: b.get_episode_slice(np.float64(1)), TypeError, r"float64"),
    ("index-on-empty", "empty", lambda b: b.get_episode(0), IndexError, r"0 episodes"),
    ("drop-empty", "empty", lambda b: b.drop_episode(), IndexError, r"empty buffer"),
    ("pop-empty", "empty", lambda b: b.pop_episode(), IndexError, r"empty buffer"),
    ("steps-slice-step-zero", "filled", lambda b: b.get_steps_slice(0, 5, 0), ValueError, r"step.*0"),
    ("read-ranges-past-end", "filled", lambda b: b.read_ranges("obs", [8], [11]), ValueError, r"n_steps=10"),
    ("read-ranges-reversed", "filled", lambda b: b.read_ranges("obs", [4], [2]), ValueError, r"start <= stop"),
    ("read-ranges-unknown-key", "filled", lambda b: b.read_ranges("nope", [0], [1]), KeyError, r"'nope'"),
    ("getitem-unknown-key", "filled", lambda b: b["nope"], KeyError, r"'nope'"),
    # meta
    ("meta-episode-ends", "filled", lambda b: b.update_meta({"episode_ends": [1, 2]}), ValueError, r"episode_ends"),
    ("meta-empty-key", "filled", lambda b: b.update_meta({"": 1}), ValueError, r"meta key ''"),
    ("meta-slash-key", "filled", lambda b: b.update_meta({"a/b": 1}), ValueError, r"'a/b'"),
    ("meta-object", "filled", lambda b: b.update_meta({"m": {"x": 1}}), TypeError, r"meta key 'm'"),
    ("reserved-temp-key", "filled", lambda b: b.add_episode({**_ep(), "_temp.obs": np.zeros(3)}), ValueError,
     r"'_temp\.obs'.*reserved"),
]


def _tree_hash(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name, fixture, call, exc, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input(tmp_path, name, fixture, call, exc, match):
    path = tmp_path / "b.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    eps = [make_episode(n, seed=i) for i, n in enumerate((3, 5, 2))] if fixture == "filled" else []
    for ep in eps:
        rb.add_episode(ep, chunks={"obs": (4, 3), "action": (4,)})
    before, disk = snapshot(rb), _tree_hash(path)
    with pytest.raises(exc, match=match):
        call(rb)
    assert_snapshot_equal(snapshot(rb), before)
    assert _tree_hash(path) == disk
    rb.close()
    with ReplayBuffer(str(path)) as again:
        assert_buffer_equal(again, eps)


def test_corpus_size():
    assert len(CASES) + len(STORE_CASES) >= 40


# ------------------------------------------------------------------------------- damaged stores on disk
def _set_codec(p):
    j = json.loads((p / "data/obs/zarr.json").read_text())
    j["codecs"][-1]["name"] = "nonexistent.codec"
    (p / "data/obs/zarr.json").write_text(json.dumps(j))


def _write_ends(values, dtype):
    def mutate(p):
        with ReplayBuffer(str(p)) as rb:
            s = rb.store
            s.delete_array("meta", "episode_ends")
            s.create_array("meta", "episode_ends", shape=(len(values),), dtype=np.dtype(dtype), chunks=(16,),
                           fill_value=-1)
            s.write("meta", "episode_ends", 0, np.asarray(values, dtype=dtype))
    return mutate


STORE_CASES = [
    ("unknown-codec", _set_codec, r"data/obs.*'nonexistent\.codec'.*install"),
    ("corrupt-zarr-json", lambda p: (p / "data/obs/zarr.json").write_text('{"zarr_format": 3, "node_t'),
     r"data/obs.*zarr\.json.*JSONDecodeError"),
    ("episode-ends-float", _write_ends([3.0, 8.0, 10.0], np.float64), r"integers.*float64"),
    ("episode-ends-negative", _write_ends([-3, 8, 10], np.int64), r"episode_ends\[0\] is -3"),
    ("episode-ends-decreasing", _write_ends([3, 2, 10], np.int64), r"decreases at episode 1.*3 > .*2"),
    ("episode-ends-past-data", _write_ends([3, 8, 12], np.int64), r"'action' has 10 rows.*is 12"),
]


@pytest.mark.parametrize("name, mutate, match", STORE_CASES, ids=[c[0] for c in STORE_CASES])
@pytest.mark.parametrize("read_only", [True, False], ids=["ro", "rw"])
def test_damaged_store(tmp_path, name, mutate, match, read_only):
    path = tmp_path / "b.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for i, n in enumerate((3, 5, 2)):
            rb.add_episode(make_episode(n, seed=i), chunks={"obs": (4, 3), "action": (4,)})
    mutate(path)
    disk = _tree_hash(path)
    with pytest.raises(CorruptStoreError, match=match):
        ReplayBuffer(str(path), read_only=read_only)
    if read_only:
        assert _tree_hash(path) == disk
    with pytest.raises(CorruptStoreError, match=match):  # and never repaired
        ReplayBuffer(str(path))


def test_missing_chunk_reported_by_verify(tmp_path):
    from replaybuf_core.inspection.verify import verify_store

    path = tmp_path / "b.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode(make_episode(10), chunks={"obs": (4, 3), "action": (4,)})
    os.remove(path / "data/obs/c/1/0")
    errors = [str(p) for p in verify_store(path) if p.level == "error"]
    assert any("data/obs" in e or "obs" in e for e in errors), errors


def test_nan_inf_allowed_and_noted_by_verify(tmp_path):
    from replaybuf_core.inspection.verify import verify_store

    path = tmp_path / "b.zarr"
    ep = make_episode(6)
    ep["obs"][2, 1], ep["obs"][4, 0] = np.nan, np.inf
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode(ep)  # data is data
        assert_buffer_equal(rb, [ep])
    problems = verify_store(path)
    assert [p.level for p in problems] == ["note"] and "obs" in str(problems[0])


def test_create_empty_refuses_keywords_it_would_ignore(tmp_path):
    """``create_empty("zarr", path=...)`` made an in-memory store and said nothing (new-user trial)."""
    from replaybuf_core import ReplayBuffer

    with pytest.raises(TypeError, match=r"\['path'\].*second positional argument"):
        ReplayBuffer.create_empty("zarr", path=str(tmp_path / "x.zarr"))
    assert not (tmp_path / "x.zarr").exists()
