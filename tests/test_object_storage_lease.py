"""The writer's lease on object storage (issue 32 #2), against moto's S3 server: a dead writer's lease
lapses by itself, a live writer's heartbeat keeps it, ``unlock`` breaks only what cannot be a live
writer's unless forced, and a writer whose lease was broken fails its next commit — the store then
holds exactly what the other writer committed.  The lease object is read with obstore directly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.errors import StoreLockedError

obstore = pytest.importorskip("obstore")
pytest.importorskip("moto")


def _episode(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 3)).astype(np.float32)}


def _raw_store(url):
    from obstore.store import from_url

    return from_url(url)


def _lease(url):
    """The lease object as JSON, read with obstore (None when there is none)."""
    try:
        return json.loads(bytes(obstore.get(_raw_store(url), ".replaybuf.lease").bytes()))
    except FileNotFoundError:
        return None


def _writer_process(url, lease_seconds, sleep=60):
    """A child holding the lease of the store at ``url`` (writable open, then sleeping)."""
    code = ("import sys, time; from replaybuf_core import ReplayBuffer\n"
            f"rb = ReplayBuffer(sys.argv[1]); print('ready', flush=True); time.sleep({sleep})\n")
    env = {**os.environ, "REPLAYBUF_LEASE_SECONDS": str(lease_seconds)}
    proc = subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_killed_writers_lease_lapses_by_itself(s3_server):
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    proc = _writer_process(url, lease_seconds=2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lease = _lease(url)
    assert lease["pid"] == proc.pid and lease["lease_seconds"] == 2
    if lease["expires_unix"] > time.time() + 0.3:  # not lapsed yet: the next writer is refused, told when
        with pytest.raises(StoreLockedError, match=rf"pid {proc.pid}.*lapses in \d+ s"):
            ReplayBuffer(url)
    time.sleep(max(0.0, lease["expires_unix"] - time.time()) + 0.2)
    with ReplayBuffer(url) as rb:  # no unlock: the dead writer's lease lapsed and was taken over
        assert _lease(url)["pid"] == os.getpid()
        rb.add_episode(_episode())
    assert _lease(url) is None
    with ReplayBuffer.create_from_path(url) as ro:
        assert ro.n_episodes == 1


def test_a_live_writers_heartbeat_keeps_its_lease_past_its_duration(s3_server):
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    proc = _writer_process(url, lease_seconds=1.5, sleep=30)
    try:
        first = _lease(url)
        time.sleep(3.2)  # more than twice the lease's duration
        renewed = _lease(url)
        assert renewed["token"] == first["token"] and renewed["renewed_unix"] > first["renewed_unix"] + 1
        assert renewed["expires_unix"] > time.time()
        with pytest.raises(StoreLockedError, match=rf"pid {proc.pid}.*\(running\)"):
            ReplayBuffer(url)
    finally:
        proc.kill()
        proc.wait()


def test_unlock_breaks_a_lease_that_has_not_lapsed_only_with_force(s3_server, capsys):
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    now = time.time()
    other = {"token": "t", "host": "robot-7", "pid": 4242, "created": "then", "created_unix": now - 5,
             "renewed_unix": now, "lease_seconds": 60, "expires_unix": now + 60}
    obstore.put(_raw_store(url), ".replaybuf.lease", json.dumps(other).encode())
    assert main(["unlock", url]) == 2
    err = capsys.readouterr().err
    assert "host robot-7 pid 4242" in err and "lapses in" in err and "--force" in err
    assert _lease(url) == other  # nothing changed
    with pytest.raises(StoreLockedError, match="robot-7"):
        ReplayBuffer(url)
    assert main(["unlock", url, "--force"]) == 0
    assert "robot-7" in capsys.readouterr().out
    tombstone = _lease(url)  # a lapsed tombstone: the next writer takes it over and fences the store first
    assert tombstone["broken"] is True and tombstone["token"] is None and tombstone["expires_unix"] < time.time()
    assert main(["unlock", url]) == 0 and "no lease to break" in capsys.readouterr().out
    lapsed = {**other, "expires_unix": time.time() - 1}
    obstore.put(_raw_store(url), ".replaybuf.lease", json.dumps(lapsed).encode())
    assert main(["unlock", url]) == 0  # a lapsed lease needs no --force
    out = capsys.readouterr().out
    assert "broke the lease held by host robot-7 pid 4242" in out and "lapses in" not in out


def test_an_old_lease_without_an_expiry_never_lapses_by_itself(s3_server):
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    old = {"token": "t", "host": socket.gethostname() + "-elsewhere", "pid": 1, "created": "then",
           "created_unix": time.time() - 3600}
    obstore.put(_raw_store(url), ".replaybuf.lease", json.dumps(old).encode())
    with pytest.raises(StoreLockedError, match="never lapses by itself.*replaybuf unlock"):
        ReplayBuffer(url)
    assert _lease(url) == old


def test_a_writer_whose_lease_was_broken_fails_its_next_commit(s3_server):
    url = s3_server.new_url()
    rb = ReplayBuffer.create_empty("zarr", url)
    rb.add_episode(_episode(seed=1))
    assert main(["unlock", url, "--force"]) == 0  # someone breaks the lease of this live writer
    code = ("import sys, numpy as np; from replaybuf_core import ReplayBuffer\n"
            "with ReplayBuffer(sys.argv[1]) as rb:\n"
            "    rb.add_episode({'obs': np.full((6, 3), 7, np.float32)})\n")
    subprocess.run([sys.executable, "-c", code, url], check=True, env=dict(os.environ))  # the next writer
    with pytest.raises(StoreLockedError, match="lost its lease"):
        rb.add_episode(_episode(seed=2))
    with pytest.raises(StoreLockedError, match="lost its lease"):
        with rb.writer() as w:
            w.add_episode(_episode(seed=3))
    with pytest.raises(StoreLockedError, match="lost its lease"):
        rb.drop_episode()
    rb.close()
    with ReplayBuffer.create_from_path(url) as ro:  # exactly what the two writers committed
        assert ro.episode_lengths.tolist() == [4, 6]
        np.testing.assert_array_equal(ro["obs"][:4], _episode(seed=1)["obs"])
        np.testing.assert_array_equal(ro["obs"][4:], np.full((6, 3), 7, np.float32))


def test_a_writer_that_could_not_renew_stops_committing(s3_server, monkeypatch):
    url = s3_server.new_url()
    with ReplayBuffer.create_empty("zarr", url) as rb:
        rb.add_episode(_episode())
        lease = rb._lock
        monkeypatch.setattr(lease, "_renewed_at", time.monotonic() - lease.ttl)  # e.g. paused, or the endpoint gone
        with pytest.raises(StoreLockedError, match="last renewed .* s ago"):
            rb.add_episode(_episode(seed=5))
        assert rb.n_episodes == 1


def test_a_bad_lease_duration_is_named(s3_server, monkeypatch):
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    monkeypatch.setenv("REPLAYBUF_LEASE_SECONDS", "soon")
    with pytest.raises(ValueError, match="REPLAYBUF_LEASE_SECONDS='soon'"):
        ReplayBuffer(url)
    assert _lease(url) is None


def test_of_two_writers_taking_over_a_lapsed_lease_one_wins(s3_server, monkeypatch):
    """The take-over PUT is conditional on the ETag read: a writer that read the lapsed lease before
    another writer took it over is refused (moto enforces ``If-Match``, as S3 does)."""
    import replaybuf_zarr.lease as lease_module

    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    lapsed = {"token": "a", "host": "robot-7", "pid": 1, "created": "then", "created_unix": time.time() - 99,
              "renewed_unix": time.time() - 90, "lease_seconds": 60, "expires_unix": time.time() - 30}
    raw = _raw_store(url)
    obstore.put(raw, ".replaybuf.lease", json.dumps(lapsed).encode())
    stale = lease_module._read(raw, obstore)  # what this writer read ...
    winner = {**lapsed, "token": "b", "host": "robot-8", "expires_unix": time.time() + 60}
    obstore.put(raw, ".replaybuf.lease", json.dumps(winner).encode())  # ... before the other took it over
    real_read = lease_module._read
    calls = []

    def read_stale_first(store, ob):
        calls.append(1)
        return stale if len(calls) == 1 else real_read(store, ob)

    monkeypatch.setattr(lease_module, "_read", read_stale_first)
    with pytest.raises(StoreLockedError, match="robot-8"):
        ReplayBuffer(url)
    assert _lease(url) == winner


def test_delete_is_for_object_storage_and_leaves_a_local_store_alone(tmp_path, capsys):
    path = tmp_path / "local.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        rb.add_episode(_episode())
    assert main(["delete", str(path), "--yes"]) == 2
    assert "rm -r" in capsys.readouterr().err
    with ReplayBuffer.create_from_path(str(path)) as ro:
        assert ro.n_episodes == 1


def test_a_killed_writer_its_parent_has_not_reaped_is_dead_not_running(s3_server, capsys):
    """A SIGKILLed writer stays a zombie until its parent waits for it: it will never renew or
    commit, so it is dead — ``unlock`` breaks its lease without --force and the refusal says how."""
    url = s3_server.new_url()
    ReplayBuffer.create_empty("zarr", url).close()
    proc = _writer_process(url, lease_seconds=60)
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # killed, not reaped: a zombie
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[0] == b"Z":
                break
        time.sleep(0.02)
    try:
        with pytest.raises(StoreLockedError, match=rf"pid {proc.pid}.*\(not running: dead\).*replaybuf unlock"):
            ReplayBuffer(url)
        assert main(["unlock", url]) == 0
        assert f"pid {proc.pid}" in capsys.readouterr().out
    finally:
        proc.wait()
    with ReplayBuffer(url) as rb:
        rb.add_episode(_episode())
