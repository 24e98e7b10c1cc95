"""replaybuf import diffusion-policy: Push-T (read-only source, one full import per session), small
copies for meta / zip / float / restart / bad-input cases."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from shared_data import PUSHT, requires_pusht

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_zarr.codecs import WebPCodec
from replaybuf_core.formats.diffusion_policy import import_diffusion_policy

needs_pusht = requires_pusht

RSS_LIMIT_KB = 512 * 1024  # 0.5 GB

_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "import", "diffusion-policy", sys.argv[1],
                    sys.argv[2], "--no-progress"], capture_output=True, text=True)
print(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr,
                  "seconds": time.perf_counter() - t,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


@pytest.fixture(scope="session")
def pusht_import(tmp_path_factory):
    """The full Push-T import, once per session, through the CLI in a subprocess whose only child is
    the import (so RUSAGE_CHILDREN's ru_maxrss is the import's peak RSS)."""
    if not Path(PUSHT).exists():
        pytest.skip("Push-T data set not available")
    dst = tmp_path_factory.mktemp("pusht") / "pusht.zarr"
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(PUSHT), str(dst)], capture_output=True,
                         text=True, check=True)
    res = json.loads(out.stdout)
    res["dst"] = dst
    return res


@needs_pusht
def test_pusht_import_counts_codecs_verdict(pusht_import):
    assert pusht_import["rc"] == 0, pusht_import["stderr"] + pusht_import["stdout"]
    assert "verification: OK" in pusht_import["stdout"]
    rb = ReplayBuffer.create_from_path(pusht_import["dst"])
    assert rb.n_episodes == 206 and rb.n_steps == 25650
    assert rb.keys() == ["action", "img", "keypoint", "n_contacts", "state"]
    codec = rb.get_compressors()["img"]
    assert codec == WebPCodec(level=0, lossless=True, method=1) and codec.lossless is True  # the exact tier, 96x96 frames
    assert rb["img"].stored_dtype == np.uint8 and rb["img"].shape == (25650, 96, 96, 3)
    assert rb["img"].dtype == np.float32  # reads give the source's dtype back
    assert rb.store.shards("data", "img") == (256, 96, 96, 3)
    assert rb.store.get_attrs("data")["conversions"]["img"]["source_dtype"] == "float32"
    assert rb.store.get_attrs("data")["conversions"]["img"]["converted_to"] == "uint8"
    for key in ("action", "keypoint", "n_contacts", "state"):
        assert rb[key].dtype == np.float32
        assert "blosc(cname=lz4" in pusht_import["stdout"]


@needs_pusht
def test_pusht_import_bit_exact_independent_check(pusht_import):
    """Independent of the importer's digests: compare arrays directly with the source."""
    src = zarr.open_group(str(PUSHT), mode="r")
    dst = zarr.open_group(str(pusht_import["dst"]), mode="r")
    np.testing.assert_array_equal(dst["meta/episode_ends"][:], src["meta/episode_ends"][:])
    for key in ("action", "keypoint", "n_contacts", "state"):
        a, b = src[f"data/{key}"][:], dst[f"data/{key}"][:]
        assert a.tobytes() == b.tobytes(), key
    ends = src["meta/episode_ends"][:]
    for ep in (0, 1, 100, 205):  # the frames of a few episodes, including the first and last
        lo = int(ends[ep - 1]) if ep else 0
        a = src["data/img"][lo:int(ends[ep])]
        b = dst["data/img"][lo:int(ends[ep])].astype(np.float32)
        assert a.tobytes() == b.tobytes(), f"episode {ep}"


@needs_pusht
def test_pusht_import_peak_rss_below_half_a_gigabyte(pusht_import):
    assert pusht_import["rc"] == 0
    assert pusht_import["maxrss_kb"] < RSS_LIMIT_KB, pusht_import


# ------------------------------------------------------------------------------ small sources
def _subset(src_path, dst_path, n_episodes=4, zarr_format=2, extra_meta=True):
    """A small diffusion_policy-style copy of the first episodes of Push-T (same chunks and codec)."""
    src = zarr.open_group(str(src_path), mode="r")
    ends = src["meta/episode_ends"][:n_episodes]
    n = int(ends[-1])
    g = zarr.open_group(str(dst_path), mode="w", zarr_format=zarr_format)
    for key in src["data"].array_keys():
        a = src["data"][key]
        g.create_array(f"data/{key}", data=a[:n], chunks=a.chunks)
    g.create_array("meta/episode_ends", data=ends)
    if extra_meta:
        g.create_array("meta/task_id", data=np.arange(n_episodes, dtype=np.int32) * 7)
    return g


@pytest.fixture(scope="module")
def small_src(tmp_path_factory):
    if not Path(PUSHT).exists():
        pytest.skip("Push-T data set not available")
    path = tmp_path_factory.mktemp("small") / "small.zarr"
    _subset(PUSHT, path)
    return path


@needs_pusht
def test_meta_preserved_and_report(small_src, tmp_path):
    r = import_diffusion_policy(small_src, tmp_path / "out.zarr", progress=False)
    assert r.ok, r.summary()
    assert r.keys["img"].converted and r.keys["img"].exact and r.keys["state"].exact
    rb = ReplayBuffer.create_from_path(tmp_path / "out.zarr")
    assert rb.n_episodes == 4
    np.testing.assert_array_equal(rb.meta["task_id"][:], np.arange(4, dtype=np.int32) * 7)
    assert "x smaller)" in r.summary() and r.source_episodes == 4
    from replaybuf_core.importing import import_dataset

    part = import_dataset(small_src, tmp_path / "part.zarr", progress=False, episodes="0:2")
    line = [x for x in part.summary().splitlines() if x.startswith("bytes on disk")][0]
    assert "(all 4 episodes)" in line and "(2 of them)" in line and "smaller" not in line  # no ratio to the whole


@needs_pusht
def test_zip_source(small_src, tmp_path):
    zpath = tmp_path / "small.zarr.zip"
    with zipfile.ZipFile(zpath, "w", compression=zipfile.ZIP_STORED) as zf:
        for f in sorted(small_src.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(small_src).as_posix())
    r = import_diffusion_policy(zpath, tmp_path / "out.zarr", progress=False)
    assert r.ok, r.summary()
    assert r.n_episodes == 4 and "task_id" in r.meta_keys


@needs_pusht
def test_cli_in_process_and_lossy(small_src, tmp_path, capsys):
    assert main(["import", "diffusion-policy", str(small_src), str(tmp_path / "a.zarr"), "--no-progress"]) == 0
    assert "verification: OK" in capsys.readouterr().out
    # the destination exists now: refused, nothing changed
    before = sorted(p.name for p in (tmp_path / "a.zarr").rglob("*"))
    assert main(["import", "diffusion-policy", str(small_src), str(tmp_path / "a.zarr"), "--no-progress"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "a.zarr").rglob("*")) == before
    assert main(["import", "diffusion-policy", str(small_src), str(tmp_path / "q.zarr"), "--no-progress",
                 "--lossy-quality", "90", "--frames-per-shard", "64"]) == 0
    out = capsys.readouterr().out
    assert "PSNR" in out
    rb = ReplayBuffer.create_from_path(tmp_path / "q.zarr")
    c = rb.get_compressors()["img"]
    assert isinstance(c, WebPCodec) and not c.lossless and c.level == 90
    assert rb.store.shards("data", "img")[0] == 64


@needs_pusht
def test_keep_dtype(small_src, tmp_path):
    r = import_diffusion_policy(small_src, tmp_path / "k.zarr", keep_dtype=True, progress=False)
    assert r.ok and not r.keys["img"].converted
    rb = ReplayBuffer.create_from_path(tmp_path / "k.zarr")
    assert rb["img"].dtype == np.float32 and "blosc" in r.keys["img"].codec


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("where", ["first", "late"])
def test_float_images_with_a_non_integer_stay_float(tmp_path, zarr_format, where):
    """A non-integer found in the first chunk (pre-check) or in a later episode (restart)."""
    rng = np.random.default_rng(0)
    n_ep, T = 6, 20
    img = rng.integers(0, 256, size=(n_ep * T, 16, 16, 3)).astype(np.float32)
    bad_row = 3 if where == "first" else n_ep * T - 5
    img[bad_row, 2, 2, 1] = 12.5
    g = zarr.open_group(str(tmp_path / "f.zarr"), mode="w", zarr_format=zarr_format)
    g.create_array("data/img", data=img, chunks=(T, 16, 16, 3))
    g.create_array("data/pos", data=rng.normal(size=(n_ep * T, 2)).astype(np.float64), chunks=(T, 2))
    g.create_array("meta/episode_ends", data=np.arange(1, n_ep + 1, dtype=np.int64) * T)
    r = import_diffusion_policy(tmp_path / "f.zarr", tmp_path / "o.zarr", progress=False)
    assert r.ok, r.summary()
    assert not r.keys["img"].converted and r.keys["img"].stored_dtype == "float32" and r.keys["img"].exact
    assert "12.5" in r.keys["img"].note
    assert bool(r.restarts) == (where == "late")
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    assert rb["img"][:].tobytes() == img.tobytes()
    assert rb.store.get_attrs("data")["conversions"] == {}


def test_integral_float_images_convert_and_negative_zero_does_not(tmp_path):
    img = np.full((10, 8, 8, 1), 7.0, dtype=np.float32)
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    g.create_array("data/img", data=img, chunks=(5, 8, 8, 1))
    g.create_array("meta/episode_ends", data=np.array([4, 10], dtype=np.int64))
    r = import_diffusion_policy(tmp_path / "s.zarr", tmp_path / "o.zarr", progress=False)
    assert r.ok and r.keys["img"].converted
    img[7, 0, 0, 0] = -0.0  # == 0.0, but not bit-exact after a uint8 round trip
    g["data/img"][:] = img
    r = import_diffusion_policy(tmp_path / "s.zarr", tmp_path / "o2.zarr", progress=False)
    assert r.ok and not r.keys["img"].converted


def test_bad_inputs_change_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        import_diffusion_policy(tmp_path / "missing.zarr", tmp_path / "o.zarr", progress=False)
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    g.create_array("data/x", data=np.zeros((5, 2), np.float32))
    g.create_array("meta/episode_ends", data=np.array([3, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="decreases at episode 1"):
        import_diffusion_policy(tmp_path / "s.zarr", tmp_path / "o.zarr", progress=False)
    assert not (tmp_path / "o.zarr").exists()
    with pytest.raises(ValueError, match="lossy_quality"):
        import_diffusion_policy(tmp_path / "s.zarr", tmp_path / "o.zarr", lossy_quality=101, progress=False)
    with pytest.raises(ValueError, match="inside"):
        import_diffusion_policy(tmp_path / "s.zarr", tmp_path / "s.zarr" / "sub", progress=False)


@pytest.mark.parametrize("bad", [np.nan, -0.0, 0.5, 256.0, -1.0, np.inf])
def test_uint8_proof_rejects_every_lossy_value(bad):
    from replaybuf_core.importing.uint8_exact import as_uint8_if_lossless

    x = np.arange(5 * 4 * 4 * 3, dtype="f4").reshape(5, 4, 4, 3) % 256
    u, row = as_uint8_if_lossless(x)
    assert row == -1 and u.dtype == np.uint8 and np.array_equal(u.astype("f4"), x)
    x[3, 1, 2, 0] = bad
    u, row = as_uint8_if_lossless(x)
    assert u is None and row == 3
