"""Copies and rechunks on a Dask cluster (``replaybuf copy/rechunk ... --scheduler ADDRESS``,
``save_to_path/set_chunks/set_compressors(..., client=)``): the session's local cluster of two worker
processes (conftest).

What is checked, and against what: every file the cluster writes has the bytes the serial command
writes (both directories read file by file), and a copy's data files are the source's own files; a
copy into a bucket holds the objects of the local copy (listed and fetched with obstore); an
unreadable source chunk fails the command naming its file, leaving no destination (copy) or the old
array (rechunk); what the workers cannot reach or write is refused before anything is written.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.store import copying
from replaybuf_core.cli import main
from replaybuf_core.importing import import_dataset
from replaybuf_core.testing.files import file_digests, without_version_times
from shared_data import PUSHT, requires_pusht

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """12 Push-T episodes imported (WebP frame shards, Blosc numerics, meta arrays, statistics)."""
    if not PUSHT.is_dir():
        pytest.skip("Push-T not found")
    dst = tmp_path_factory.mktemp("source") / "pusht.zarr"
    assert import_dataset(PUSHT, dst, "diffusion-policy", episodes="0:12", progress=False).ok
    return dst


@pytest.fixture
def small_blocks(monkeypatch):
    """Copy blocks of one destination object each: many tasks, most of them mid-episode."""
    monkeypatch.setattr(copying, "_BLOCK_BYTES", 1)


def _data_files(digests):
    return {p: d for p, d in digests.items() if p.startswith("data" + os.sep) and os.sep + "c" + os.sep in p}


@requires_pusht
def test_a_copy_on_the_cluster_is_the_serial_copy_bit_for_bit(client, source, tmp_path, small_blocks, capsys):
    serial, spread = tmp_path / "serial.zarr", tmp_path / "spread.zarr"
    assert main(["copy", str(source), str(serial)]) == 0
    assert main(["copy", str(source), str(spread), "--scheduler", client.scheduler.address]) == 0
    assert "12 episodes" in capsys.readouterr().out
    want, got = file_digests(serial), file_digests(spread)
    assert sorted(got) == sorted(want)
    assert [p for p in want if got[p] != want[p]] == []
    src = _data_files(file_digests(source))  # the chunk and shard files are the source's own
    assert len(src) >= 8 and _data_files(got) == src
    assert sorted(os.listdir(tmp_path)) == ["serial.zarr", "spread.zarr"]  # nothing left beside them


@requires_pusht
def test_a_rechunk_on_the_cluster_is_the_serial_one_bit_for_bit(client, source, tmp_path, small_blocks):
    import zarr

    serial, spread = tmp_path / "serial.zarr", tmp_path / "spread.zarr"
    shutil.copytree(source, serial)
    shutil.copytree(source, spread)
    args = ["--chunk-length", "*=100", "--compressor", "img=disk"]
    assert main(["rechunk", str(serial), *args]) == 0
    assert main(["rechunk", str(spread), *args, "--scheduler", client.scheduler.address]) == 0
    want, got = file_digests(serial), file_digests(spread)
    assert sorted(got) == sorted(want)
    assert [p for p in want if got[p] != want[p]] == []
    before, after = zarr.open_group(str(source), mode="r"), zarr.open_group(str(spread), mode="r")
    for key in ("action", "state", "img"):  # the values, read with zarr-python
        assert np.array_equal(after["data"][key][:], before["data"][key][:])
    assert after["data"]["action"].chunks[0] == 100


@requires_pusht
def test_a_copy_into_a_bucket_on_the_cluster_holds_the_local_copys_objects(client, source, tmp_path, s3_server,
                                                                            small_blocks):
    """Explicit ``storage_options`` travel to the workers (the session's cluster may have started
    before the S3 server's AWS_* variables were set)."""
    import obstore
    from obstore.store import S3Store

    options = {"endpoint": s3_server.endpoint, "access_key_id": "test", "secret_access_key": "test",
               "region": "us-east-1", "client_options": {"allow_http": True}}
    url = s3_server.new_url()
    local = tmp_path / "local.zarr"
    with ReplayBuffer.create_from_path(source) as rb:
        rb.save_to_path(local)
        rb.save_to_path(url, client=client, storage_options=options)
    bucket, _, prefix = url[len("s3://"):].partition("/")
    store = S3Store(bucket, **options)
    paths = [m["path"] for batch in obstore.list(store, prefix=prefix + "/") for m in batch]
    got = {p[len(prefix) + 1:]: bytes(obstore.get(store, p).bytes()) for p in paths
           if not p.endswith(".replaybuf.lease")}
    want = {}
    for d, _, files in os.walk(local):
        for f in files:
            if not f.startswith(".replaybuf"):
                path = os.path.join(d, f)
                want[os.path.relpath(path, local).replace(os.sep, "/")] = open(path, "rb").read()
    assert sorted(got) == sorted(want)
    # (each save records its content as version 0: when, and by which command, differ)
    assert [p for p in want if without_version_times(got[p]) != without_version_times(want[p])] == []


def _break_a_chunk(store):
    """Overwrite the last chunk file of ``data/action`` in ``store`` (a directory); returns its chunk
    coordinates as the error names them, e.g. ``(3, 0)``."""
    victims = sorted(p for p in _data_files(file_digests(store)) if p.startswith(os.path.join("data", "action")))
    path = store / victims[-1]
    path.write_bytes(b"not a chunk")
    return "(" + ", ".join(path.relative_to(store / "data" / "action" / "c").parts) + ")"


@requires_pusht
def test_an_unreadable_chunk_fails_a_cluster_copy_by_name_and_leaves_no_destination(client, source, tmp_path,
                                                                                   small_blocks, capsys):
    src = tmp_path / "src.zarr"
    shutil.copytree(source, src)
    coords = _break_a_chunk(src)
    dst = tmp_path / "dst.zarr"
    assert main(["copy", str(src), str(dst), "--scheduler", client.scheduler.address]) == 2
    err = capsys.readouterr().err
    assert f"SRC {src}: data/action: chunk {coords}" in err, err
    assert sorted(os.listdir(tmp_path)) == ["src.zarr"]  # no destination, no build beside it


@requires_pusht
def test_an_unreadable_chunk_fails_a_cluster_rechunk_and_keeps_the_old_array(client, source, tmp_path, small_blocks,
                                                                            capsys):
    src = tmp_path / "src.zarr"
    shutil.copytree(source, src)
    coords = _break_a_chunk(src)
    before = file_digests(src)
    assert main(["rechunk", str(src), "--chunk-length", "action=100", "--scheduler", client.scheduler.address]) == 2
    err = capsys.readouterr().err
    assert f"{src}: rewriting 'action' failed, which is left as it was (no key was rewritten" in err
    assert f"data/action: chunk {coords}" in err
    assert file_digests(src) == before  # the old array as it was, no temp array left


@requires_pusht
def test_what_the_workers_cannot_reach_or_write_is_refused_before_anything_is_written(client, source, tmp_path,
                                                                                       capsys):
    address = client.scheduler.address
    h5 = tmp_path / "x.h5"
    assert main(["copy", str(source), str(h5), "--backend", "hdf5", "--scheduler", address]) == 2
    assert "writes zarr stores only" in capsys.readouterr().err
    assert not h5.exists()
    assert main(["copy", str(source), str(source), "--scheduler", address]) == 2
    assert "is SRC" in capsys.readouterr().err
    assert main(["copy", str(source), str(tmp_path / "z.zarr"), "--scheduler", "head-node"]) == 2
    assert "scheduler 'head-node' is not a Dask scheduler address (tcp://host:port)" in capsys.readouterr().err
    assert not (tmp_path / "z.zarr").exists()
    assert main(["stats", str(source), "--key", "action", "--scheduler", address]) == 0  # stored ones: said so
    assert "note: stored statistics are used as they are" in capsys.readouterr().err
    taken = tmp_path / "taken.zarr"
    taken.mkdir()
    assert main(["copy", str(source), str(taken)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert os.listdir(taken) == []

    memory = ReplayBuffer.copy_from_path(source, backend="zarr")  # a zarr MemoryStore: this process only
    chunks = memory.store.chunks("data", "action")
    with pytest.raises(ValueError, match="has no location Dask workers can open it by"):
        memory.set_chunks({"action": (7, 2)}, client=client)
    assert memory.store.chunks("data", "action") == chunks and "action" in memory.keys()
    with pytest.raises(ValueError, match="has no location Dask workers can open it by"):
        memory.save_to_path(tmp_path / "y.zarr", client=client)
    assert not (tmp_path / "y.zarr").exists()
    with ReplayBuffer.create_from_path(source) as rb:
        with pytest.raises(TypeError, match="client must be a distributed.Client, got str"):
            rb.save_to_path(tmp_path / "y.zarr", client=address)
    assert not (tmp_path / "y.zarr").exists()


@requires_pusht
def test_ctrl_c_of_a_copy_on_workers_says_one_line_and_leaves_nothing(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, the local cluster's workers included:
    they ignore it (the client stops the command), so the command exits 130 with one line, not a
    KeyboardInterrupt traceback from every worker; nothing is left beside DST."""
    import glob
    import signal
    import subprocess
    import sys
    import time

    dst = tmp_path / "c.zarr"
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", "copy", str(PUSHT), str(dst), "--workers", "2",
                             "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # the workers are writing frames
        if sum(os.path.isfile(f) for f in glob.glob(f"{tmp_path}/.c.zarr.building-*/data/img/c/**", recursive=True)) >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the copy ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.splitlines() == ["replaybuf copy: interrupted"], err
    assert os.listdir(tmp_path) == []
