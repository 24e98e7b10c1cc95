"""A mixture streaming from a bucket (moto's S3 server behind a request-logging proxy on loopback):
requests per batch are the shards a batch touches (one coalesced range request each, never one a
frame); the block order touches ``span`` shards a batch; with a node's local byte cache every shard
object is fetched once, by one whole-object GET, however many processes read it; the cache stays
within its byte bound; and what is read equals the same mixture over a local copy.

Expected shards come from the rows the samples read (episode start + anchor step, from the store's
``episode_ends`` read locally) divided by the shard length — not from the reader; requests from the
proxy's log of what crossed the wire.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

import numpy as np
import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

from benchmarks.latency_proxy import LatencyProxy  # noqa: E402
from replaybuf_core import ReplayBuffer  # noqa: E402
from replaybuf_core.mixture import Mixture, MixtureSource  # noqa: E402

SHARD = 32
LENGTHS = [50, 37, 50, 41, 50, 50]  # 278 frames: 9 shards of 32, the last one short


@pytest.fixture(scope="module")
def stores(s3_server, tmp_path_factory):
    """The same store on local disk and in the bucket (frames in shards of 32)."""
    local = tmp_path_factory.mktemp("streaming") / "frames.zarr"
    rng = np.random.default_rng(0)
    with ReplayBuffer.create_empty("zarr", local) as rb, rb.writer(frames="exact", frames_per_shard=SHARD) as w:
        for n in LENGTHS:
            w.add_episode({"img": rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8),
                           "x": rng.standard_normal((n, 2)).astype(np.float32)})
    url = s3_server.new_url()
    with ReplayBuffer.create_from_path(local) as rb:
        assert rb.store.shards("data", "img")[0] == SHARD
        rb.save_to_path(url)
    return local, url


@pytest.fixture
def proxy(s3_server, monkeypatch):
    """A proxy (no added latency) in front of the server, logging every request."""
    up = urlparse(s3_server.endpoint)
    p = LatencyProxy(up.hostname, up.port, 0.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", p.endpoint)
    yield p
    p.close()


def _img_gets(log, since: int) -> list[tuple[str, bool]]:
    """``(path, ranged)`` of the GETs of frame shards in ``log[since:]``."""
    return [(path, ranged) for method, path, ranged in log[since:]
            if method == "GET" and "/data/img/c/" in path]


def _shards(mix, positions) -> set[int]:
    where = mix.locate(positions)
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    return set(((starts[where["source_episode"]] + where["source_frame"]) // SHARD).tolist())


def test_requests_per_batch_are_the_shards_it_touches_and_the_block_order_touches_few(stores, proxy):
    _local, url = stores
    for block, span in ((1, None), (SHARD, 2)):
        mix = Mixture([MixtureSource(url, cache_bytes=0)], block=block, span=span)  # no decoded-chunk LRU
        mix.sample_batch(np.arange(len(mix)))  # every shard's index read once, as a training run's first batches
        per_batch = []
        for j in range(len(mix) // 16):
            positions = np.arange(16 * j, 16 * (j + 1))
            before = len(proxy.log)
            mix.sample_batch(positions)
            gets = _img_gets(proxy.log, before)
            assert all(ranged for _, ranged in gets)  # parts of shards, never whole objects (no local cache)
            assert len(gets) == len(_shards(mix, positions))  # one coalesced request a shard touched
            per_batch.append(len(gets))
        if block == 1:
            assert np.mean(per_batch) >= 5  # a random order touches most of the 9 shards a batch
        else:
            assert max(per_batch) <= span + 1  # a group's span shards (+1 where a batch crosses groups)


def test_a_nodes_local_cache_fetches_each_shard_once_for_all_its_processes(stores, proxy, tmp_path):
    local, url = stores
    cache = {"replaybuf_cache_dir": str(tmp_path / "node-cache"), "replaybuf_cache_bytes": 1 << 30}
    want = Mixture([MixtureSource(local)], block=SHARD, span=2)
    readers = [Mixture([MixtureSource(url, storage_options=cache, cache_bytes=0)], block=SHARD, span=2)
               for _ in range(2)]  # two readers of one node (each with its own stores, as two processes)
    assert readers[0].fingerprint == want.fingerprint
    before = len(proxy.log)
    for epoch in (0, 1):
        for j in range(0, len(want), 20):
            positions = np.arange(j, min(j + 20, len(want)))
            expected = want.sample_batch(positions, epoch)
            for mix in readers:
                got = mix.sample_batch(positions, epoch)
                for k in expected:
                    np.testing.assert_array_equal(got[k], expected[k])
    gets = _img_gets(proxy.log, before)
    n_shards = -(-sum(LENGTHS) // SHARD)
    assert sorted(path for path, _ in gets) == sorted(set(path for path, _ in gets))  # none twice
    assert len(gets) == n_shards and not any(ranged for _, ranged in gets)  # whole objects, once each


def test_workers_of_a_node_share_the_cache_and_fetch_each_shard_once(stores, proxy, tmp_path):
    pytest.importorskip("torch")
    from replaybuf_core.torch import MixtureDataset, MixtureLoader

    _local, url = stores
    cache = {"replaybuf_cache_dir": str(tmp_path / "node-cache"), "replaybuf_cache_bytes": 1 << 30}
    mix = Mixture([MixtureSource(url, storage_options=cache, cache_bytes=0)], block=SHARD, span=2)
    before = len(proxy.log)
    loader = MixtureLoader(MixtureDataset(mix, 8), num_workers=2, multiprocessing_context="spawn", timeout=120)
    seen = [p for batch in loader for p in batch["mixture_position"].tolist()]
    assert seen == list(range(len(mix)))
    gets = _img_gets(proxy.log, before)
    assert len(gets) == -(-sum(LENGTHS) // SHARD) == len({p for p, _ in gets})


def test_the_local_cache_stays_within_its_bytes_and_still_reads_right(stores, proxy, tmp_path):
    local, url = stores
    shard_bytes = max(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local / "data" / "img" / "c")
                      for f in fs)
    bound = 2 * shard_bytes + shard_bytes // 2
    cache = {"replaybuf_cache_dir": str(tmp_path / "small"), "replaybuf_cache_bytes": bound}
    mix = Mixture([MixtureSource(url, storage_options=cache, cache_bytes=0)])  # a random order: shards come back
    want = Mixture([MixtureSource(local)])
    sizes = []
    for j in range(0, len(mix), 25):
        positions = np.arange(j, min(j + 25, len(mix)))
        got, expected = mix.sample_batch(positions), want.sample_batch(positions)
        np.testing.assert_array_equal(got["img"], expected["img"])
        sizes.append(sum(os.path.getsize(tmp_path / "small" / f) for f in os.listdir(tmp_path / "small")
                         if f.endswith(".obj")))
    assert max(sizes) <= bound and max(sizes) >= shard_bytes


def test_cache_options_are_refused_on_a_writable_open(stores):
    _local, url = stores
    with pytest.raises(ValueError, match="read-only"):
        ReplayBuffer(url, storage_options={"replaybuf_cache_dir": "/tmp/x"})


def test_the_read_ahead_fetches_the_next_run_of_blocks_before_its_batches(stores, proxy, tmp_path):
    _local, url = stores
    cache = {"replaybuf_cache_dir": str(tmp_path / "node-cache"), "replaybuf_cache_bytes": 1 << 30}
    mix = Mixture([MixtureSource(url, storage_options=cache, cache_bytes=0)], block=SHARD, span=2)
    run = SHARD * 2
    ahead = mix.read_ahead_positions(run, 2 * run)
    assert len(ahead) == len(_shards(mix, np.arange(run, 2 * run)))  # one sample per block of the run
    before = len(proxy.log)
    mix.warm(ahead)
    fetched = {p for p, _ in _img_gets(proxy.log, before)}
    assert len(fetched) == len(_shards(mix, np.arange(run, 2 * run)))
    before = len(proxy.log)
    for j in range(run, 2 * run, 16):  # the run's batches: nothing left to fetch
        mix.sample_batch(np.arange(j, j + 16))
    assert _img_gets(proxy.log, before) == []
