"""Importing straight into a bucket (``replaybuf import ... s3://...``) against the session's local
S3 server (see ``s3_server`` in conftest.py).

Expected values come from elsewhere: the source read with zarr-python directly, the objects a local
import of the same episodes writes (read from its directory), and the bucket's listing with obstore.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer, registry
from replaybuf_core.cli import main
from replaybuf_core.errors import StoreLockedError
from replaybuf_core.formats.diffusion_policy import import_diffusion_policy
from replaybuf_core.importing import import_dataset

from s3_helpers import kill_when_committed
from replaybuf_core.testing.files import file_digests, without_version_times
from shared_data import PUSHT, requires_pusht

obstore = pytest.importorskip("obstore")
pytest.importorskip("moto")
pytestmark = requires_pusht


def _objects(url):
    """{path below the prefix: bytes} of every object under ``url`` (the lease left out)."""
    from obstore.store import from_url

    bucket, _, prefix = url[len("s3://"):].partition("/")
    store = from_url(f"s3://{bucket}")
    paths = [m["path"] for batch in obstore.list(store, prefix=prefix + "/") for m in batch]
    return {p[len(prefix) + 1:]: bytes(obstore.get(store, p).bytes()) for p in paths
            if not p.endswith(".replaybuf.lease")}


def _source(key, n_steps):
    return zarr.open_group(str(PUSHT), mode="r")["data"][key][:n_steps]


def test_a_url_import_writes_the_objects_a_local_import_writes(s3_server, tmp_path):
    url = s3_server.new_url()
    local = tmp_path / "local.zarr"
    assert main(["import", "diffusion-policy", str(PUSHT), url, "--episodes", "0:5", "--no-progress"]) == 0
    assert main(["import", "diffusion-policy", str(PUSHT), str(local), "--episodes", "0:5", "--no-progress"]) == 0
    remote, files = _objects(url), {p: open(local / p, "rb").read() for p in file_digests(local)}
    assert sorted(remote) == sorted(files)
    differ = [p for p in files if without_version_times(remote[p]) != without_version_times(files[p])]
    assert differ == [], differ  # (the version log says when and by which command: two runs differ there)
    ends = zarr.open_group(str(PUSHT), mode="r")["meta"]["episode_ends"][:5]
    with ReplayBuffer.create_from_path(url) as rb:
        assert np.array_equal(rb.episode_ends, ends)
        for key in ("action", "state", "keypoint"):
            assert np.array_equal(rb[key][:], _source(key, int(ends[-1])))
        assert np.array_equal(rb["img"][:], _source("img", int(ends[-1])).astype(np.uint8))
        assert rb.store.get_attrs("data")["import"]["complete"] is True


def test_the_python_api_takes_storage_options(s3_server):
    url = s3_server.new_url()
    options = {"endpoint": os.environ["AWS_ENDPOINT_URL"], "access_key_id": "test", "secret_access_key": "test",
               "region": "us-east-1", "client_options": {"allow_http": True}}
    report = import_dataset(PUSHT, url, "diffusion-policy", episodes="2", progress=False, storage_options=options)
    assert report.ok and report.dst == url
    # the report counts the arrays' objects (metadata and chunks) as imported; the stats arrays are
    # written after it, and the groups' zarr.json are not arrays
    arrays = {p: b for p, b in _objects(url).items()
              if "_stats." not in p and p not in ("zarr.json", "data/zarr.json", "meta/zarr.json")}
    assert report.stored_bytes == sum(map(len, arrays.values()))
    with ReplayBuffer.create_from_path(url, storage_options=options) as rb:
        ends = zarr.open_group(str(PUSHT), mode="r")["meta"]["episode_ends"][:3]
        assert rb.n_steps == ends[2] - ends[1]
        assert np.array_equal(rb["action"][:], _source("action", int(ends[2]))[ends[1]:])


def test_an_existing_store_at_the_url_is_refused_and_left_alone(s3_server, capsys):
    url = s3_server.new_url()
    with ReplayBuffer.create_empty("zarr", url) as rb:
        rb.add_episode({"obs": np.arange(6, dtype=np.float32).reshape(3, 2)})
    before = _objects(url)
    for extra in ([], ["--overwrite"]):
        assert main(["import", "diffusion-policy", str(PUSHT), url, "--episodes", "0", "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert url in err and "already holds a store" in err and "no rename" in err
        assert _objects(url) == before
    with pytest.raises(FileExistsError, match="no rename"):
        import_diffusion_policy(PUSHT, url, progress=False, overwrite=True)
    assert _objects(url) == before


def test_bad_destinations_are_named_and_nothing_is_written(s3_server, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = "s3://no-such-bucket-for-replaybuf/x.zarr"
    assert main(["import", "diffusion-policy", str(PUSHT), url, "--episodes", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert url in err and "cannot be read" in err
    assert main(["import", "diffusion-policy", str(PUSHT), "foo://bucket/x.zarr", "--no-progress"]) == 2
    assert "unknown scheme" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    prefix_with_other_things = s3_server.new_url()
    from obstore.store import from_url

    obstore.put(from_url(prefix_with_other_things), "notes.txt", b"not a store")
    assert main(["import", "diffusion-policy", str(PUSHT), prefix_with_other_things, "--no-progress"]) == 2
    assert "no zarr store; refusing to write there" in capsys.readouterr().err
    assert sorted(_objects(prefix_with_other_things)) == ["notes.txt"]


def test_a_killed_url_import_leaves_the_committed_episodes(s3_server):
    url = s3_server.new_url()
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", "import", "diffusion-policy", str(PUSHT),
                             url, "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        kill_when_committed(proc, url, 3)
    finally:
        proc.wait()
    assert main(["unlock", url]) == 0  # the dead importer's lease, broken as an operator would
    with pytest.warns(RuntimeWarning, match="interrupted append"):
        rb = ReplayBuffer(url)  # a writable open recovers: the rows staged past episode_ends are dropped
    with rb:
        k = rb.n_episodes
        ends = zarr.open_group(str(PUSHT), mode="r")["meta"]["episode_ends"][:k]
        assert k >= 3 and np.array_equal(rb.episode_ends, ends)
        for key in ("action", "state"):
            assert rb[key].shape[0] == ends[-1]
            assert np.array_equal(rb[key][:], _source(key, int(ends[-1])))
        assert rb.store.get_attrs("data")["import"]["complete"] is False
        # per-episode meta grew with the commits: one row per committed episode, none for the rest ...
        assert rb.store.shape("meta", "source_episode_index") == (k,)
        assert rb.store.read("meta", "source_episode_index", 0, k).tolist() == list(range(k))
        rb.delete_episodes([1])  # ... so an edit keeps every episode's label
        assert rb.store.read("meta", "source_episode_index", 0, k - 1).tolist() == [0] + list(range(2, k))
        k -= 1
    # and what inspects it says so: verify fails naming the unfinished import, info shows it
    from replaybuf_core.inspection.summary import buffer_info, format_info
    from replaybuf_core.inspection.verify import verify_store

    problems = [p for p in verify_store(url) if p.level == "error"]
    assert any("the import into this store did not finish (data attribute import.complete is false): it holds "
               f"the {k} episode(s)" in p.message for p in problems), problems
    assert main(["verify", url]) == 1
    assert "import: INCOMPLETE (import.complete is false)" in format_info(buffer_info(url))
    # and it can be removed safely: only when asked, never from under a writer, every object gone
    from obstore.store import from_url

    bucket, _, prefix = url[len("s3://"):].partition("/")
    def listing(lease=False):
        paths = [m["path"] for b in obstore.list(from_url(f"s3://{bucket}"), prefix=prefix + "/") for m in b]
        return sorted(p for p in paths if lease or not p.endswith(".replaybuf.lease"))

    before = listing()
    assert main(["delete", url]) == 2 and listing() == before  # no --yes: nothing deleted
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from replaybuf_core import ReplayBuffer\n"
                               "rb = ReplayBuffer(sys.argv[1]); print('ready', flush=True); time.sleep(60)", url],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:  # a live writer in another process holds the lease: refused, nothing deleted
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match=f"pid {holder.pid}"):
            registry.guess_backend(url).delete_store(url)
    finally:
        holder.kill()
        holder.wait()
    assert listing() == before
    assert main(["unlock", url]) == 0  # its holder is dead now
    assert main(["delete", url, "--yes"]) == 0
    assert listing(lease=True) == []
    assert main(["delete", url, "--yes"]) == 2  # nothing there any more: named, exit 2
