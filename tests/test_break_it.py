"""Regression tests for the failures of the second break-it trial (issue 13), one section each.
(13.1, a damaged episode_ends "repaired" into an empty store: test_damage_is_not_repaired.py;
13.3, kill trials for every persistent backend: CrashConformance in the conformance kit.)"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.errors import CorruptStoreError, StoreLockedError
from replaybuf_core.testing import make_episode, tree_digest


_digest = tree_digest


def _store(path: Path, lengths=(5, 6, 7)) -> Path:
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for i, n in enumerate(lengths):
            rb.add_episode(make_episode(n, i))
    return path


# --------------------------------------------------------------------- 13.2 writer-lock bypasses
@pytest.fixture
def recording(tmp_path):
    """A store another process holds open for writing (as a recording job would)."""
    path = _store(tmp_path / "rec.zarr")
    code = ("import sys, time\nfrom replaybuf_core import ReplayBuffer\n"
            f"rb = ReplayBuffer({str(path)!r})\nprint('ready', flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield path
    finally:
        proc.kill()
        proc.wait()


def test_nothing_replaces_a_store_being_recorded_into(recording, tmp_path):
    before = _digest(recording)
    other = ReplayBuffer.create_empty_numpy()
    other.add_episode(make_episode(3, 9))
    with pytest.raises(StoreLockedError):
        other.save_to_path(recording)
    with pytest.raises(StoreLockedError):
        other.save_to_store(str(recording), backend="zarr")
    src = _store(tmp_path / "src.zarr", lengths=(2,))
    with pytest.raises(StoreLockedError):
        ReplayBuffer.copy_from_path(src, store=str(recording), backend="zarr")
    assert main(["synth", "circle", str(recording), "--episodes", "2", "--image-size", "8", "--overwrite"]) != 0
    assert _digest(recording) == before
    assert ReplayBuffer.create_from_path(recording).n_episodes == 3


def test_import_overwrite_of_a_store_being_recorded_into_keeps_it(recording, tmp_path):
    g = zarr.open_group(str(tmp_path / "dp.zarr"), mode="w", zarr_format=2)
    g.create_array("data/x", data=np.arange(8, dtype="f4").reshape(4, 2))
    g.create_array("meta/episode_ends", data=np.array([2, 4], dtype="i8"))
    before = _digest(recording)
    rc = main(["import", "diffusion-policy", str(tmp_path / "dp.zarr"), str(recording), "--overwrite",
               "--no-progress"])
    assert rc != 0
    assert _digest(recording) == before, "the recording store must not be touched"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rec.zarr")], "nothing left beside it"


def test_replacing_builds_beside_and_swaps(tmp_path):
    """A save over an existing store replaces it whole; a failing save leaves the old one intact."""
    path = _store(tmp_path / "s.zarr")
    new = ReplayBuffer.create_empty_numpy()
    new.add_episode(make_episode(4, 7))
    new.save_to_path(path)
    got = ReplayBuffer.create_from_path(path)
    assert got.n_episodes == 1 and got.n_steps == 4
    before = _digest(path)

    class Boom(RuntimeError):
        pass

    def failing_copy(*args, **kwargs):
        raise Boom("disk full")

    big = ReplayBuffer.create_empty_numpy()
    big.add_episode(make_episode(9, 1))
    big._copy_into = failing_copy  # the copy fails midway
    with pytest.raises(Boom):
        big.save_to_path(path)
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


# ------------------------------------------------------------ 13.4 verify right after a SIGKILL
def test_missing_chunks_past_the_committed_rows_are_no_error(tmp_path, capsys):
    path = _store(tmp_path / "s.zarr")
    g = zarr.open_group(str(path), mode="r+")
    for key in ("obs", "action"):  # a killed writer grew the arrays; their new chunks never landed
        a = g["data"][key]
        a.resize((a.shape[0] + 500,) + a.shape[1:])
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rows past meta/episode_ends[-1]" in out and "is missing from the store" not in out


def test_a_missing_committed_chunk_is_still_an_error(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for i in range(4):
            rb.add_episode(make_episode(6, i), chunks={"obs": (4, 3), "action": (4,)})
    (path / "data" / "obs" / "c" / "1" / "0").unlink()
    assert main(["verify", str(path)]) == 1
    assert "chunk 1 (rows [4, 8)) is missing" in capsys.readouterr().out


# ------------------------------------------------------------ 13.5 one descriptor per chunk file
_SAMPLE_UNDER_A_LOW_LIMIT = r"""
import os, resource, sys
import numpy as np
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.inspection.verify import verify_store
path = sys.argv[1]
problems = [p for p in verify_store(path) if p.level == "error"]
assert not problems, problems
rb = ReplayBuffer.create_from_path(path)
rb.cache_bytes = 0
s = SequenceSampler(rb, sequence_length=4)
for start in range(0, len(s), 256):
    s.sample_batch(list(range(start, min(len(s), start + 256))))
x = rb.get_steps_slice(None, None)["obs"]
assert x.shape == (rb.n_steps, 3)
print("open descriptors", len(os.listdir("/proc/self/fd")))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_thousands_of_chunk_files_under_a_low_descriptor_limit(tmp_path):
    path = tmp_path / "many.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        with rb.writer() as w:
            for i in range(400):
                w.add_episode(make_episode(5, i))
        rb.set_chunks({"obs": (1, 3), "action": (1,)})  # 2,000 chunk files per key
    n_files = sum(len(f) for _, _, f in os.walk(path / "data"))
    assert n_files > 3900
    r = subprocess.run([sys.executable, "-c", _SAMPLE_UNDER_A_LOW_LIMIT, str(path)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split()[-1]) < 128


def test_a_failed_import_removes_what_it_built(tmp_path, monkeypatch):
    from replaybuf_core.formats import diffusion_policy as dp
    from replaybuf_core.importing.check import Checker

    g = zarr.open_group(str(tmp_path / "dp.zarr"), mode="w", zarr_format=2)
    g.create_array("data/x", data=np.arange(40, dtype="f4").reshape(20, 2), chunks=(2, 2))
    g.create_array("meta/episode_ends", data=np.arange(2, 21, 2, dtype="i8"))

    calls = {"n": 0}
    real = Checker.stage

    def failing_stage(self, *args):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(24, "Too many open files")
        return real(self, *args)

    monkeypatch.setattr(Checker, "stage", failing_stage)
    with pytest.raises(OSError, match="Too many open files"):
        dp.import_diffusion_policy(tmp_path / "dp.zarr", tmp_path / "out.zarr", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.zarr"]


# ------------------------------------------------------------------- 13.6 chunk files' permissions
def test_chunk_files_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "s.zarr"
        with ReplayBuffer.create_empty("zarr", str(path)) as rb:
            with rb.writer() as w:  # the fast writer stores the objects
                for i in range(30):
                    w.add_episode({"img": np.full((5, 8, 8, 3), i, np.uint8), "x": np.zeros((5, 2), "f4")})
    finally:
        os.umask(old)
    modes = {stat.S_IMODE(os.stat(os.path.join(d, f)).st_mode)
             for d, _, files in os.walk(path / "data") for f in files}
    assert modes == {0o644}, {oct(m) for m in modes}


# ---------------------------------------------------------------- 13.7 two threads, one buffer
@pytest.mark.parametrize("backend", ["numpy", "zarr"])
@pytest.mark.parametrize("via_writer", [False, True])
def test_threads_writing_through_one_buffer_take_turns(tmp_path, backend, via_writer):
    store = str(tmp_path / "t.zarr") if backend == "zarr" else None
    rb = ReplayBuffer.create_empty(backend, store)
    n_threads, per_thread = 4, 15
    writer = rb.writer() if via_writer else None
    errors = []

    def work(t):
        try:
            for j in range(per_thread):
                ep = {"who": np.full((3 + (j % 4),), t * 1000 + j, np.int64),
                      "obs": np.full((3 + (j % 4), 2), t + j / 100, np.float32)}
                (writer or rb).add_episode(ep)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if writer is not None:
        writer.close()
    assert not errors
    if backend == "zarr":
        rb.close()
        rb = ReplayBuffer.create_from_path(store)
    assert rb.n_episodes == n_threads * per_thread
    seen = set()
    for i in range(rb.n_episodes):  # every episode whole: one tag, the length its tag implies
        ep = rb.get_episode(i)
        tags = set(ep["who"].tolist())
        assert len(tags) == 1
        tag = tags.pop()
        t, j = divmod(tag, 1000)
        assert len(ep["who"]) == 3 + (j % 4)
        np.testing.assert_array_equal(ep["obs"], np.full((3 + (j % 4), 2), t + j / 100, np.float32))
        seen.add(tag)
    assert seen == {t * 1000 + j for t in range(n_threads) for j in range(per_thread)}


# ------------------------------------------------------- 13.8 schema creation and frame stacks
def _schema(tmp_path, shape):
    from replaybuf_core.layout.schema import DatasetSchema

    return DatasetSchema(tmp_path / "f.zarr", {
        "frames": {"shape": (0,) + shape, "chunks": (1,) + shape, "dtype": "uint8", "needs_compressor": True},
        "action": {"shape": (0, 2), "chunks": (100, 2), "dtype": "float32", "needs_compressor": True}})


@pytest.mark.parametrize("shape, serializer", [((84, 84, 4), "replaybuf.webp"), ((4, 84, 84), "bytes"),
                                               ((84, 84, 3), "replaybuf.webp"), ((84, 84, 2), "bytes")])
def test_frame_stacks_are_stored_exactly(tmp_path, shape, serializer):
    from replaybuf_zarr import create_zarr_replay_buffer

    rng = np.random.default_rng(0)
    eps = [{"frames": rng.integers(0, 256, (6,) + shape, dtype=np.uint8),
            "action": rng.random((6, 2)).astype("f4")} for _ in range(3)]
    create_zarr_replay_buffer(_schema(tmp_path, shape), eps, progress=False).close()
    arr = zarr.open_group(str(tmp_path / "f.zarr"), mode="r")["data/frames"]
    assert arr.metadata.to_dict()["codecs"][0]["name"] in (serializer, "sharding_indexed")
    np.testing.assert_array_equal(arr[:], np.concatenate([e["frames"] for e in eps]))  # max error 0


def test_a_rejected_creation_leaves_nothing_and_can_be_retried(tmp_path):
    from replaybuf_zarr import create_zarr_replay_buffer

    schema = _schema(tmp_path, (84, 84, 4))
    with pytest.raises(ValueError, match="preset"):
        create_zarr_replay_buffer(schema, [], numeric_compressor="no-such-preset", progress=False)
    with pytest.raises((TypeError, ValueError)):
        create_zarr_replay_buffer(schema, [], image_frames_per_shard=-3, progress=False)
    assert not (tmp_path / "f.zarr").exists()
    create_zarr_replay_buffer(schema, [], progress=False).close()
    assert ReplayBuffer.create_from_path(tmp_path / "f.zarr").n_episodes == 0


# ------------------------------------------------------------------ 13.9 keys with a backslash
@pytest.mark.parametrize("backend", ["numpy", "zarr"])
@pytest.mark.parametrize("key", ["a\\b", "a\nb", "\x00", "a/b", ".."])
def test_path_like_keys_are_rejected_and_nothing_written(backend, key):
    rb = ReplayBuffer.create_empty(backend)
    rb.add_episode({"ok": np.zeros(3)})
    with pytest.raises(ValueError, match="invalid"):
        rb.add_episode({"ok": np.zeros(3), key: np.zeros(3)})
    with pytest.raises(ValueError, match="invalid"):
        ReplayBuffer.create_empty(backend).add_episode({key: np.zeros(3)})
    assert rb.keys() == ["ok"] and rb.n_episodes == 1


# --------------------------------------------------------------------------- 13.10 the smaller ones
def test_verify_says_what_it_cannot_check(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode({"raw": np.arange(10, dtype="i4")}, compressors={"raw": None})
    chunk = path / "data" / "raw" / "c" / "0"
    chunk.write_bytes(b"\0" * chunk.stat().st_size)  # zeroed: reads back as zeros
    assert main(["verify", str(path)]) == 0
    assert "data/raw is stored without a compressor or checksum" in capsys.readouterr().out


@pytest.mark.parametrize("which", ["zarr.json", "data/zarr.json", "meta/zarr.json"])
@pytest.mark.parametrize("content", [b"", b"\0" * 64])
def test_a_damaged_zarr_json_is_named(tmp_path, capsys, which, content):
    path = _store(tmp_path / "s.zarr")
    (path / which).write_bytes(content)
    assert main(["info", str(path)]) != 0
    assert main(["verify", str(path)]) != 0
    err = capsys.readouterr().err
    assert str(path / which) in err


def test_synth_refuses_a_giant_image_size(tmp_path, capsys):
    assert main(["synth", "circle", str(tmp_path / "g.zarr"), "--episodes", "1", "--image-size", "100000"]) == 2
    err = capsys.readouterr().err
    assert "image_size must be <= 1024" in err and "Traceback" not in err
    assert not (tmp_path / "g.zarr").exists()


@pytest.mark.parametrize("name, magic", [("o.jpg", b"\xff\xd8\xff"), ("o.png", b"\x89PNG"), ("o.webp", b"RIFF")])
def test_view_writes_the_format_its_name_says(tmp_path, name, magic):
    path = _store(tmp_path / "s.zarr")
    assert main(["view", str(path), str(tmp_path / name), "--episode", "0"]) == 0
    assert (tmp_path / name).read_bytes()[:len(magic)] == magic


def test_view_refuses_an_unknown_suffix(tmp_path):
    path = _store(tmp_path / "s.zarr")
    assert main(["view", str(path), str(tmp_path / "o.txt"), "--episode", "0"]) == 2
    assert not (tmp_path / "o.txt").exists()


def test_uncorrupted_store_verifies_clean_after_all_this(tmp_path):
    """The commit record written by every commit agrees with episode_ends on a healthy store."""
    path = _store(tmp_path / "s.zarr")
    with ReplayBuffer(str(path)) as rb:
        rb.drop_episode()
        rb.add_episode(make_episode(2, 5))
    assert main(["verify", str(path)]) == 0
    with pytest.raises(CorruptStoreError):  # and a mismatch is caught (the record is checked)
        g = zarr.open_group(str(path), mode="r+")
        g["meta"].attrs["replaybuf_commit"] = {"n_episodes": 3, "n_steps": 999}
        ReplayBuffer.create_from_path(path)


def test_the_descriptor_pool_never_closes_a_file_a_read_is_using(tmp_path, monkeypatch):
    """With a pool of 4, threads reading 200 files through evictions always get each file's bytes."""
    from concurrent.futures import ThreadPoolExecutor

    from replaybuf_zarr import file_pool as chunk_reader

    monkeypatch.setattr(chunk_reader, "MAX_OPEN_FILES", 4)
    pool = chunk_reader._FilePool()
    files = []
    for i in range(200):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes([i % 256]) * (100 + i))
        files.append(str(p))

    def read(i):
        h = pool.open(0, files[i])
        try:
            data = os.pread(h.fd, 10_000, 0)
        finally:
            pool.release(h)
        return data == bytes([i % 256]) * (100 + i)

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(read, [i % 200 for i in range(4000)]))
    assert pool.open_count() <= 4
    h = pool.open(0, files[0])
    pool.release_all(owner=0)  # retired while in use: still readable until released
    assert h.retired and os.pread(h.fd, 1, 0) == b"\0"
    pool.release(h)
    assert pool.open_count() == 0


# ------------------------------------------------- found by a new-user trial after the fixes above
def test_replacing_a_store_this_process_has_open_for_writing_is_refused(tmp_path):
    path = _store(tmp_path / "s.zarr")
    before = _digest(path)
    held = ReplayBuffer(str(path))  # a live writable handle in this very process
    other = ReplayBuffer.create_empty_numpy()
    other.add_episode(make_episode(3, 9))
    with pytest.raises(StoreLockedError, match="open for writing in this process"):
        other.save_to_path(path)
    held.add_episode(make_episode(2, 4))
    held.close()
    assert ReplayBuffer.create_from_path(path).n_episodes == 4
    assert _digest(path) != before  # the handle's own append landed; nothing else touched it


def test_a_terminated_import_leaves_nothing_and_a_killed_one_is_cleaned_up_later(tmp_path):
    import signal

    g = zarr.open_group(str(tmp_path / "dp.zarr"), mode="w", zarr_format=2)
    g.create_array("data/img", data=np.random.default_rng(0).integers(0, 255, (3000, 32, 32, 3)).astype("f4"),
                   chunks=(100, 32, 32, 3))
    g.create_array("meta/episode_ends", data=np.arange(100, 3001, 100, dtype="i8"))
    cmd = [sys.executable, "-m", "replaybuf_core.cli", "import", "diffusion-policy", str(tmp_path / "dp.zarr"),
           str(tmp_path / "out.zarr"), "--no-progress"]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.zarr.building-*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.05)  # the build has started (3,000 frames to encode and check)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        left = list(tmp_path.glob(".out.zarr.building-*"))
        if sig == signal.SIGTERM:
            assert proc.returncode == 143 and "terminated" in err, err[-500:]
            assert not left and not (tmp_path / "out.zarr").exists()
        else:
            assert left, "a SIGKILL cannot clean up"
    assert main(["import", "diffusion-policy", str(tmp_path / "dp.zarr"), str(tmp_path / "out.zarr"),
                 "--no-progress"]) == 0
    assert not list(tmp_path.glob(".out.zarr.building-*")), "the dead build was removed"


@pytest.mark.parametrize("key", ["zarr.json", ".zarray", ".zgroup", ".zattrs", "k" * 241])
def test_keys_that_are_store_file_names_or_too_long_are_rejected(key):
    rb = ReplayBuffer.create_empty("zarr")
    with pytest.raises(ValueError, match="reserved|bytes long"):
        rb.add_episode({key: np.zeros(3), "obs": np.zeros(3)})
    assert rb.keys() == [] and rb.n_episodes == 0


@pytest.mark.parametrize("spec, exc, match", [
    ({"shape": (0, 2), "chunks": (10**12, 2), "dtype": "f4", "needs_compressor": True}, ValueError, "2 GiB"),
    ({"shape": (0, 2), "chunks": (10, 2), "dtype": "f4", "needs_compressor": "no"}, TypeError, "True or False"),
])
def test_schema_specs_that_cannot_work_are_refused_before_anything_is_written(tmp_path, spec, exc, match):
    from replaybuf_core.layout.schema import DatasetSchema

    with pytest.raises(exc, match=match):
        DatasetSchema(tmp_path / "x.zarr", {"x": spec})
    assert not (tmp_path / "x.zarr").exists()


def test_verify_does_not_promise_repairs_it_refuses(tmp_path, capsys):
    path = _store(tmp_path / "s.zarr")
    (path / "meta" / "episode_ends" / "c" / "0").unlink()
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "trimmed on writable ones" not in out and "dropped on writable ones" not in out
    assert "recovery does not repair damage" in out
