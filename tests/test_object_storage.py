"""Stores on object storage: ``s3://`` URLs against the session's local S3 server (moto's
``ThreadedMotoServer``, a real HTTP endpoint on 127.0.0.1; see ``s3_server`` in conftest.py).

What is checked, and against what: data read back equals what was written (NumPy arrays kept by the
test); the writer's lease is seen on the server with obstore directly; errors name the URL and leave
the bucket as it was (its listing before and after).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.cli import main
from replaybuf_core.errors import StoreLockedError
from replaybuf_core.inspection.verify import verify_store

obstore = pytest.importorskip("obstore")
pytest.importorskip("moto")


def _episodes(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [{"obs": rng.standard_normal((4 + i, 3)).astype(np.float32),
             "img": rng.integers(0, 256, (4 + i, 8, 8, 3), dtype=np.uint8)} for i in range(n)]


def _listing(url):
    from obstore.store import from_url

    bucket, _, prefix = url[len("s3://"):].partition("/")
    store = from_url(f"s3://{bucket}")
    return sorted(m["path"] for batch in obstore.list(store, prefix=prefix or None) for m in batch)


def test_record_read_sample_and_verify_on_s3(s3_server):
    url = s3_server.new_url()
    eps = _episodes()
    with ReplayBuffer.create_empty("zarr", url) as rb:
        with rb.writer() as w:
            for ep in eps[:2]:
                w.add_episode(ep)
        rb.add_episode(eps[2])
    with ReplayBuffer.create_from_path(url) as ro:
        assert ro.n_episodes == 3 and ro.read_only
        for i, ep in enumerate(eps):
            got = ro.get_episode(i)
            assert np.array_equal(got["obs"], ep["obs"]) and np.array_equal(got["img"], ep["img"])
        sampler = SequenceSampler(ro, sequence_length=2)
        sample = sampler.sample_sequence(0)
        assert np.array_equal(sample["obs"], eps[0]["obs"][:2])
        stats = ro.get_stats(["obs"])
        x = np.concatenate([e["obs"] for e in eps]).astype(np.float64)
        np.testing.assert_allclose(stats["obs"]["mean"], x.mean(0), rtol=1e-9)
    assert [p for p in verify_store(url) if p.level == "error"] == []
    assert main(["info", url]) == 0
    assert main(["verify", url]) == 0


def test_the_lease_keeps_a_second_writer_out_and_names_the_holder(s3_server, capsys):
    url = s3_server.new_url()
    rb = ReplayBuffer.create_empty("zarr", url)
    rb.add_episode(_episodes(1)[0])
    assert any(p.endswith(".replaybuf.lease") for p in _listing(url))
    code = ("import sys; from replaybuf_core import ReplayBuffer\n"
            "try:\n    ReplayBuffer(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__, e); sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 3 and "StoreLockedError" in out.stdout and f"pid {os.getpid()}" in out.stdout
    with ReplayBuffer.create_from_path(url) as ro:  # readers take no lease
        assert ro.n_episodes == 1
    rb.close()
    assert not any(p.endswith(".replaybuf.lease") for p in _listing(url))
    ReplayBuffer(url).close()  # free again


def _writer_process(url):
    """A child process holding the lease of a new store at ``url`` (opened writable, sleeping)."""
    ReplayBuffer.create_empty("zarr", url).close()
    code = ("import sys, time; from replaybuf_core import ReplayBuffer\n"
            "rb = ReplayBuffer(sys.argv[1]); print('ready', flush=True); time.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True, env=dict(os.environ))


def test_a_dead_writers_lease_is_reported_and_broken_explicitly(s3_server, capsys):
    url = s3_server.new_url()
    proc = _writer_process(url)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with pytest.raises(StoreLockedError, match=rf"pid {proc.pid}.*s ago.*replaybuf unlock"):
        ReplayBuffer(url)
    assert main(["unlock", url]) == 0
    assert f"pid {proc.pid}" in capsys.readouterr().out
    with ReplayBuffer(url) as rb:
        rb.add_episode(_episodes(1)[0])
        assert rb.n_episodes == 1


def test_unlock_refuses_a_live_writer_of_this_host_unless_forced(s3_server, capsys):
    url = s3_server.new_url()
    proc = _writer_process(url)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match=r"\(running\)"):
            ReplayBuffer(url)
        assert main(["unlock", url]) == 2
        assert "still running" in capsys.readouterr().err
        assert main(["unlock", url, "--force"]) == 0
    finally:
        proc.kill()
        proc.wait()


def test_merge_and_synth_refuse_urls_and_write_nothing_local(s3_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["synth", "circle", "s3://replaybuf-test/syn.zarr", "--episodes", "2"]) == 2
    src = tmp_path / "a.zarr"
    with ReplayBuffer.create_empty("zarr", str(src)) as rb:
        rb.add_episode(_episodes(1)[0])
    with pytest.raises(ValueError, match="merge destination .* object-storage URL"):
        ReplayBuffer.merge([src], "s3://replaybuf-test/merged.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zarr"]


def test_a_lost_reply_to_a_successful_lease_put_is_not_a_foreign_writer(s3_server, monkeypatch):
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    real = obstore.put

    def put_then_lose_the_reply(store, path, body, **kw):
        real(store, path, body, **kw)
        raise ConnectionResetError("reply lost")

    monkeypatch.setattr(obstore, "put", put_then_lose_the_reply)
    rb = ReplayBuffer(url)  # the lease holds our token: acquired
    monkeypatch.setattr(obstore, "put", real)
    rb.add_episode(_episodes(1)[0])
    rb.close()
    assert not any(p.endswith(".replaybuf.lease") for p in _listing(url))


def test_bad_locations_are_named_and_nothing_is_written(s3_server, tmp_path, monkeypatch):
    with pytest.raises(OSError, match="s3://no-such-bucket/x.zarr: the object store cannot be read"):
        ReplayBuffer.create_from_path("s3://no-such-bucket/x.zarr")
    with pytest.raises(OSError, match="no-such-bucket"):
        ReplayBuffer.create_empty("zarr", "s3://no-such-bucket/x.zarr")
    empty = s3_server.new_url()
    with pytest.raises(FileNotFoundError, match=f"{empty}: no zarr store there"):
        ReplayBuffer.create_from_path(empty)
    # a prefix that holds something else
    other = s3_server.new_url()
    from obstore.store import from_url

    obstore.put(from_url(other), "notes.txt", b"not a store")
    before = _listing(other)
    with pytest.raises(FileExistsError, match="holds objects .*notes.txt.* no zarr store"):
        ReplayBuffer.create_empty("zarr", other)
    assert _listing(other) == before
    # an unreachable endpoint
    with pytest.raises(OSError, match="s3://replaybuf-test/y.zarr"):
        ReplayBuffer.create_from_path("s3://replaybuf-test/y.zarr", storage_options={
            "endpoint": "http://127.0.0.1:9", "client_options": {"allow_http": True}, "retry_config": {"max_retries": 0}})
    # unknown schemes are never local paths; imports into a URL are refused and leave no local 's3:' dir
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="unknown scheme"):
        ReplayBuffer.create_from_path("foo://bucket/x.zarr")
    assert main(["import", "diffusion-policy", str(tmp_path / "missing.zarr"), "s3://replaybuf-test/imp.zarr"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_save_to_path_and_copy_between_disk_and_s3(s3_server, tmp_path):
    eps = _episodes(2, seed=4)
    local = ReplayBuffer.create_empty("zarr", str(tmp_path / "a.zarr"))
    for ep in eps:
        local.add_episode(ep)
    local.get_stats()
    url = s3_server.new_url()
    local.save_to_path(url)
    with pytest.raises(FileExistsError, match="already holds a zarr store"):
        local.save_to_path(url)
    local.close()
    back = ReplayBuffer.copy_from_path(url)
    for i, ep in enumerate(eps):
        assert np.array_equal(back.get_episode(i)["img"], ep["img"])
    with ReplayBuffer.create_from_path(url) as ro:
        rec = ro.store.get_attrs("meta")["replaybuf_stats"]
        assert json.dumps(rec) and rec["keys"]["obs"]["n_episodes"] == 2  # the stats came along
    assert [p for p in verify_store(url) if p.level == "error"] == []


@pytest.fixture
def sharded_url(s3_server, tmp_path):
    """A synthetic store with WebP frames in shards of 16 (replaybuf synth), copied to S3."""
    local = tmp_path / "syn.zarr"
    assert main(["synth", "circle", str(local), "--episodes", "6", "--length", "20", "--image-size", "16",
                 "--frames-per-shard", "16"]) == 0
    url = s3_server.new_url()
    with ReplayBuffer.create_from_path(local) as rb:
        rb.save_to_path(url)
    return url, local


def test_sharded_frames_are_read_by_coalesced_range_requests(sharded_url):
    url, local = sharded_url
    with ReplayBuffer.create_from_path(url) as ro, ReplayBuffer.create_from_path(local) as lo:
        ro.cache_bytes = lo.cache_bytes = 0
        assert ro.store.shards("data", "image")[0] == 16
        rng = np.random.default_rng(1)
        starts = np.sort(rng.integers(0, ro.n_steps - 3, 40))
        got = ro.read_ranges("image", starts, starts + 3)
        import zarr

        want = zarr.open_group(str(local), mode="r")["data"]["image"]  # read another way: zarr-python, on disk
        for a, g in zip(starts, got):
            assert np.array_equal(g, want[a:a + 3])
        fetcher = ro.store._reader("data", "image")._fetch.objects
        before = fetcher.requests
        ro.read_ranges("image", [16, 20, 33], [19, 24, 40])  # shards 1 and 2, indexes cached: one request each
        assert fetcher.requests - before == 2


def test_a_shard_replaced_after_its_index_was_read_is_read_again(sharded_url):
    url, _ = sharded_url
    with ReplayBuffer.create_from_path(url) as ro:
        ro.cache_bytes = 0
        old = ro.read_ranges("image", [0], [4])[0].copy()  # the index of shard 0 is cached now
        with ReplayBuffer(url) as rw:
            new = (255 - old).astype(np.uint8)
            rw.store.write("data", "image", 0, new)  # the shard object is replaced (a whole-object PUT)
        assert np.array_equal(ro.read_ranges("image", [0], [4])[0], new)


def test_unlock_at_an_unreachable_endpoint_is_a_named_error(s3_server, monkeypatch, capsys):
    """Was obstore's raw GenericError traceback: now an OSError naming the URL (CLI: exit 2)."""
    from replaybuf_core.registry import guess_backend

    unreachable = {"endpoint": "http://127.0.0.1:9", "client_options": {"allow_http": True},
                   "retry_config": {"max_retries": 0}}
    with pytest.raises(OSError, match=r"s3://replaybuf-test/gone.zarr: the object store cannot be read"):
        guess_backend("s3://replaybuf-test/gone.zarr").break_lock("s3://replaybuf-test/gone.zarr",
                                                                   storage_options=unreachable)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert main(["unlock", "s3://replaybuf-test/gone.zarr"]) == 2
    assert "s3://replaybuf-test/gone.zarr: the object store cannot be read" in capsys.readouterr().err


def test_dataloader_workers_forked_after_an_s3_open_fail_by_name_instead_of_hanging(s3_server, tmp_path):
    """obstore's runtime does not survive a fork (a forked worker would hang forever): a worker forked
    after the main process opened an s3:// store is refused with a message naming spawn; spawned
    workers read the store."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from replaybuf_core.torch import WindowDataset

    local = tmp_path / "syn.zarr"
    assert main(["synth", "circle", str(local), "--episodes", "3", "--length", "10", "--image-size", "8"]) == 0
    url = s3_server.new_url()
    with ReplayBuffer.create_from_path(local) as rb:
        rb.save_to_path(url)
        want = rb["action"][:8]
    ds = WindowDataset(url, {"action": [0]}, keys=["action"])
    assert len(ds) == 30  # sized in the main process: obstore's runtime runs here now
    forked = DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="fork", timeout=120)
    with pytest.raises(RuntimeError, match="forked from process .* multiprocessing_context='spawn'"):
        next(iter(forked))
    spawned = DataLoader(ds, batch_size=8, num_workers=1, multiprocessing_context="spawn", timeout=300)
    batch = next(iter(spawned))
    np.testing.assert_array_equal(batch["action"][:, 0].numpy(), want)
    assert isinstance(batch["action"], torch.Tensor)
