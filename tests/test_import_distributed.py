"""Imports on a Dask cluster (``import_dataset(..., client=)``, ``replaybuf import --workers N`` /
``--scheduler ADDRESS``): a local cluster of two worker processes for the session (conftest).

What is checked, and against what: every object the distributed import writes has the bytes the
serial import writes (its directory read file by file), from diffusion-policy and from LeRobot
(videos whose spans start mid-episode); a worker SIGKILLed mid-run changes nothing
of that; a source episode that cannot be read fails the import naming it, with nothing left; the
spans of the plan tile every key's rows in whole stored objects (a hypothesis model).
"""

from __future__ import annotations

import warnings

import os
import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.importing import import_dataset
from replaybuf_core.importing.distributed import plan_spans
from replaybuf_core.importing.plan import KeyPlan
from replaybuf_core.testing.files import file_digests
from s3_helpers import kill_when_committed
from shared_data import LEROBOT_V3_2CAM, PUSHT, requires_pusht, requires_v3_2cam

pytest.importorskip("distributed")
EPISODES = "0:30"  # 3,700 steps of Push-T: 15 frame shards, so both workers write several


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    if not PUSHT.is_dir():
        pytest.skip("Push-T not found")
    dst = tmp_path_factory.mktemp("serial") / "pusht.zarr"
    assert import_dataset(PUSHT, dst, "diffusion-policy", episodes=EPISODES, progress=False).ok
    return file_digests(dst)


@requires_pusht
def test_the_distributed_import_is_the_serial_one_bit_for_bit(client, serial, tmp_path):
    dst = tmp_path / "pusht.zarr"
    report = import_dataset(PUSHT, dst, "diffusion-policy", episodes=EPISODES, progress=False, client=client)
    assert report.ok, report.problems
    got = file_digests(dst)
    assert sorted(got) == sorted(serial)
    assert [p for p in got if got[p] != serial[p]] == []
    assert not [p for p in os.listdir(tmp_path) if p != "pusht.zarr"]  # no build left beside it


@requires_v3_2cam
def test_a_lerobot_import_on_the_cluster_is_the_serial_one_bit_for_bit(client, tmp_path, monkeypatch):
    """The v3 fixture (AV1 and H.264 with B-frames, episodes spread over several files) in spans of
    one 32-frame shard each: most spans start mid-episode, and their tasks seek into the videos."""
    pytest.importorskip("av")
    from replaybuf_core.importing import distributed

    serial = tmp_path / "serial.zarr"
    assert import_dataset(LEROBOT_V3_2CAM, serial, "lerobot", progress=False, image_frames_per_shard=32).ok
    monkeypatch.setattr(distributed, "SPAN_BYTES", 1)  # one stored object a span
    spread = tmp_path / "spread.zarr"
    report = import_dataset(LEROBOT_V3_2CAM, spread, "lerobot", progress=False, image_frames_per_shard=32,
                            client=client)
    assert report.ok, report.problems
    want, got = file_digests(serial), file_digests(spread)
    assert sorted(got) == sorted(want)
    assert [p for p in want if got[p] != want[p]] == []
    with ReplayBuffer.create_from_path(spread) as rb:
        starts = set(np.r_[0, rb.episode_ends[:-1]].tolist())
    inside = [a for a in range(0, int(rb.episode_ends[-1]), 32) if a not in starts]
    assert len(inside) >= 20  # spans that start mid-episode (of 27 frame spans per camera)


@requires_pusht
def test_a_worker_killed_mid_import_changes_nothing(client, serial, tmp_path, monkeypatch):
    """A worker SIGKILLed mid-run — once the import has written its first frame shard and before it
    has committed every episode (a kill after a fixed delay landed, under load, in the cluster's start;
    one at the first commit came too late when the small keys' one span finished last): the scheduler
    runs its tasks again on the worker its nanny starts, the import resumes and ends equal to the
    serial one, byte for byte.  An attempt whose kill could not land mid-run is run again (3 at most)."""
    from replaybuf_core.importing import distributed

    monkeypatch.setattr(distributed, "SPAN_BYTES", 1)  # spans of one stored object: many tasks
    monkeypatch.setattr(distributed, "COMMIT_INTERVAL", 0.0)
    for attempt in range(3):
        pids = list(client.run(os.getpid).values())
        dst = tmp_path / f"a{attempt}" / "pusht.zarr"
        dst.parent.mkdir()
        at_kill: dict[str, int] = {}
        finished = threading.Event()

        def kill_one_mid_run():
            deadline = time.monotonic() + 300
            while not finished.is_set() and time.monotonic() < deadline:
                builds = list(dst.parent.glob(f".{dst.name}.building-*"))
                if builds and any((builds[0] / "data" / "img").rglob("c/*")):  # a frame shard written
                    committed = _committed_beside(dst)
                    if committed < 30:
                        at_kill["episodes"] = committed
                        os.kill(pids[0], signal.SIGKILL)  # its nanny starts a new worker; the scheduler reruns
                    return
                time.sleep(0.005)

        killer = threading.Thread(target=kill_one_mid_run)
        killer.start()
        try:
            report = import_dataset(PUSHT, dst, "diffusion-policy", episodes=EPISODES, progress=False, client=client)
        finally:
            finished.set()
            killer.join()
        if "episodes" in at_kill:
            break
    assert at_kill.get("episodes", 30) < 30, f"the kill did not land mid-run in 3 attempts: {at_kill}"
    assert report.ok, report.problems
    got = file_digests(dst)
    assert sorted(got) == sorted(serial)
    assert [p for p in serial if got.get(p) != serial[p]] == []
    assert pids[0] not in _worker_pids(client)  # the worker really was replaced
    assert not [p for p in os.listdir(dst.parent) if p != "pusht.zarr"]  # no build left beside it


def _committed_beside(dst) -> int:
    """Episodes committed so far by the import building beside ``dst`` (0 before its first commit)."""
    import warnings

    for build in dst.parent.glob(f".{dst.name}.building-*"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # rows written past the committed ones
                with ReplayBuffer.create_from_path(build) as ro:
                    return ro.n_episodes
        except Exception:  # noqa: BLE001 - not created yet, or being created
            pass
    return 0


def _worker_pids(client, timeout: float = 60.0) -> list[int]:
    """The workers' process ids — asked again while the scheduler still broadcasts to the killed worker
    (its nanny restarting it): ``client.run`` then fails with ``CommClosedError`` for a moment."""
    from distributed.comm.core import CommClosedError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return list(client.run(os.getpid).values())
        except (CommClosedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@requires_pusht
def test_the_cli_on_a_running_scheduler(client, serial, tmp_path, capsys):
    dst = tmp_path / "pusht.zarr"
    assert main(["import", "diffusion-policy", str(PUSHT), str(dst), "--episodes", EPISODES, "--no-progress",
                 "--scheduler", client.scheduler.address]) == 0
    assert "verification: OK" in capsys.readouterr().out
    assert file_digests(dst) == serial
    assert main(["import", str(PUSHT), str(tmp_path / "x.zarr"), "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err
    assert main(["import", str(PUSHT), str(tmp_path / "x.zarr"), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()
    assert main(["import", str(PUSHT), str(tmp_path / "x.h5"), "--backend", "hdf5", "--episodes", "0",
                 "--scheduler", client.scheduler.address]) == 2
    assert "writes zarr stores only" in capsys.readouterr().err
    assert not (tmp_path / "x.h5").exists()


def test_an_unreadable_source_episode_fails_the_import_by_name(client, tmp_path):
    src = tmp_path / "src.zarr"
    rng = np.random.default_rng(0)
    with ReplayBuffer.create_empty("zarr", str(src)) as rb:
        rb.store.create_array("data", "obs", shape=(0, 3), dtype=np.float32, chunks=(10, 3), codec=None)
        for _ in range(6):
            rb.add_episode({"obs": rng.standard_normal((10, 3)).astype(np.float32)})
    chunk = src / "data" / "obs" / "c" / "3" / "0"  # rows 30..39: episode 3
    assert chunk.is_file()
    chunk.write_bytes(b"not a chunk")
    dst = tmp_path / "dst.zarr"
    with pytest.raises(ValueError, match="episode 3") as exc:
        import_dataset(src, dst, "diffusion-policy", progress=False, client=client)
    assert str(src) in str(exc.value) and "'obs'" in str(exc.value)
    assert sorted(os.listdir(tmp_path)) == ["src.zarr"]  # nothing built is left


def _plan(rows_per_object, sharded, shape, n):
    chunks = (1,) + shape if sharded else (rows_per_object,) + shape
    shards = (rows_per_object,) + shape if sharded else None
    return KeyPlan("k", None, (n,) + shape, np.dtype(np.float32), np.dtype(np.float32), chunks, shards, None,
                   sharded, False, False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.booleans(), st.integers(1, 64)), min_size=1, max_size=4),
       st.integers(0, 5000), st.integers(1, 2**20))
def test_spans_tile_each_key_in_whole_stored_objects(keys, n, span_bytes):
    plans = {f"k{i}": _plan(rows, sharded, (width,), n) for i, (rows, sharded, width) in enumerate(keys)}
    spans = list(plan_spans(plans, n, span_bytes))
    assert [s[1] for s in spans] == sorted(s[1] for s in spans)  # in row order
    for key, (rows, _, _) in zip(plans, keys):
        mine = sorted((a, b) for k, a, b in spans if k == key)
        row = 0
        for a, b in mine:  # contiguous, no overlap, from 0 to n
            assert a == row and b > a
            assert a % rows == 0 and (b % rows == 0 or b == n)  # cut only at object boundaries
            row = b
        assert row == n


@requires_pusht
def test_a_killed_client_leaves_a_bucket_store_of_committed_episodes(s3_server):
    """The client dies mid-import (SIGKILL): its local cluster dies with it, and the store at the URL
    opens with the episodes committed so far, each equal to the source (read with zarr-python)."""
    import subprocess
    import sys
    import zarr

    url = s3_server.new_url()
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", "import", "diffusion-policy", str(PUSHT),
                             url, "--workers", "2", "--no-progress"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        kill_when_committed(proc, url, 20)
    finally:
        proc.wait()
    assert main(["unlock", url]) == 0
    with warnings.catch_warnings(record=True) as caught:  # rows past the commit (the kill usually leaves some)
        warnings.simplefilter("always")
        rb = ReplayBuffer(url)
    assert all("interrupted append" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert all(rb.store.shape("data", key)[0] == rb.n_steps for key in rb.keys())  # trimmed to the commit
    with rb:
        k = rb.n_episodes
        src = zarr.open_group(str(PUSHT), mode="r")
        ends = src["meta"]["episode_ends"][:k]
        assert k >= 20 and np.array_equal(rb.episode_ends, ends)
        n = int(ends[-1])
        for key in ("action", "state"):
            assert np.array_equal(rb[key][:], src["data"][key][:n])
        assert np.array_equal(rb["img"][n - 300:], src["data"]["img"][n - 300:n].astype(np.uint8))
        assert rb.store.get_attrs("data")["import"]["complete"] is False


@requires_pusht
def test_statistics_on_the_cluster_are_the_serial_ones_bit_for_bit(client, tmp_path, capsys):
    from replaybuf_core.cluster.stats import cluster_summarizer

    dst = tmp_path / "pusht.zarr"
    assert import_dataset(PUSHT, dst, "diffusion-policy", episodes="0:12", progress=False).ok
    with ReplayBuffer.create_from_path(dst) as rb:
        serial = rb.get_stats(recompute=True)
        spread = rb.get_stats(recompute=True, summarizer=cluster_summarizer(client, str(dst)))
    assert sorted(serial) == sorted(spread) == sorted(rb.keys())
    for key in serial:
        for name, v in serial[key].items():
            assert v.tobytes() == spread[key][name].tobytes(), (key, name)
    assert main(["stats", str(dst), "--json", "--recompute", "--scheduler", client.scheduler.address]) == 0
    import json

    printed = json.loads(capsys.readouterr().out)
    assert printed["action"]["mean"] == serial["action"]["mean"].tolist()


@requires_pusht
def test_relative_paths_reach_the_workers_of_a_running_scheduler(client, tmp_path, monkeypatch, capsys):
    """stats, copy and rechunk with --scheduler and paths relative to a working directory the
    workers do not share (they were started elsewhere): the same results as without the cluster."""
    import json

    monkeypatch.chdir(tmp_path)
    assert import_dataset(PUSHT, "rel.zarr", "diffusion-policy", episodes="0:6", progress=False).ok
    address = client.scheduler.address
    assert main(["stats", "rel.zarr", "--json", "--recompute", "--scheduler", address]) == 0
    printed = json.loads(capsys.readouterr().out)
    with ReplayBuffer.create_from_path("rel.zarr") as rb:
        assert printed["action"]["mean"] == rb.get_stats(recompute=True)["action"]["mean"].tolist()
        want = {k: rb[k][:] for k in rb.keys()}
    assert main(["copy", "rel.zarr", "copy.zarr", "--scheduler", address]) == 0
    assert main(["rechunk", "copy.zarr", "--chunk-length", "action=7", "--scheduler", address]) == 0
    with ReplayBuffer.create_from_path("copy.zarr") as copy:
        assert copy.get_chunks()["action"][0] == 7
        for key, values in want.items():
            assert np.array_equal(copy[key][:], values), key


@requires_pusht
def test_a_cluster_without_workers_is_given_up_on_with_a_message(tmp_path, monkeypatch, capsys):
    """--scheduler at a cluster with no worker: a clear error after a bounded wait, nothing written."""
    import distributed

    from replaybuf_core.cluster import tasks

    monkeypatch.setattr(tasks, "WORKER_WAIT", 2)
    assert import_dataset(PUSHT, tmp_path / "p.zarr", "diffusion-policy", episodes="0:2", progress=False).ok
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty:
        started = time.monotonic()
        assert main(["stats", str(tmp_path / "p.zarr"), "--recompute", "--scheduler", empty.scheduler_address]) == 2
        assert time.monotonic() - started < 60
        assert main(["copy", str(tmp_path / "p.zarr"), str(tmp_path / "c.zarr"), "--scheduler",
                     empty.scheduler_address]) == 2
    err = capsys.readouterr().err
    assert err.count(f"the Dask cluster at {empty.scheduler_address} has no workers (waited 2 s") == 2, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.zarr"]  # no copy, no build left beside it


def test_stats_on_a_cluster_whose_workers_left_is_given_up_on_with_a_message(tmp_path, monkeypatch, capsys):
    """Every worker gone once the command has started (its tasks submitted): ``stats --scheduler``
    waited forever; now it gives up with the message of a cluster that had none, after the same
    bounded wait (and so do copy and rechunk: the window is theirs too)."""
    import distributed

    from replaybuf_core.cluster import tasks

    monkeypatch.setattr(tasks, "WORKER_WAIT", 2)
    monkeypatch.setattr(tasks, "WORKER_CHECK", 0.2, raising=False)
    store = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(store)) as rb:
        for e in range(3):
            rb.add_episode({"action": np.full((5, 2), e, dtype=np.float32)})
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        enter = tasks.TaskWindow.__enter__

        def the_workers_leave(window):  # after the window saw a worker, before it submits
            cluster.scale(0)
            deadline = time.monotonic() + 60
            while cluster.scheduler.workers:
                assert time.monotonic() < deadline, "the worker did not leave"
                time.sleep(0.05)
            return enter(window)

        monkeypatch.setattr(tasks.TaskWindow, "__enter__", the_workers_leave)
        done: dict[str, int] = {}
        command = threading.Thread(daemon=True, target=lambda: done.setdefault("rc", main(
            ["stats", str(store), "--recompute", "--scheduler", cluster.scheduler_address])))
        command.start()
        command.join(120)
        assert not command.is_alive(), "stats still waits for a worker 120 s after they left"
    assert done["rc"] == 2
    assert f"the Dask cluster at {cluster.scheduler_address} has no workers (waited 2 s" in capsys.readouterr().err


def test_a_task_that_kills_its_workers_ends_in_a_named_error():
    """Dask's KilledWorker (a raw traceback, before) becomes a RuntimeError naming the task."""
    import dask
    import distributed

    from replaybuf_core.cluster.tasks import TaskWindow

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                     host="127.0.0.1") as cluster, distributed.Client(cluster) as c:
        with pytest.raises(RuntimeError, match=r"boom: a task \(boom-0-\w+\) took down every worker that ran it"):
            with TaskWindow(c, os._exit, [3], "boom") as results:
                list(results)
        # the nanny is restarting the worker the task killed: let it come back before the cluster closes
        # (distributed's close of a worker process still starting fails "can only join a started process")
        c.wait_for_workers(1, timeout=60)
