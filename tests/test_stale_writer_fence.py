"""A writer paused past its lock (issue 47 #2): what it had in flight must not damage its successor.

The trial, on ``s3://`` (moto's server) and on local disk: writer A, a child process, appends in a
loop (``add_episode`` and ``EpisodeWriter`` blocks, episodes of random lengths over small chunks, so
partial chunks are rewritten all the time); it is SIGSTOPped at a random instant; on s3:// we wait
until its lease (``REPLAYBUF_LEASE_SECONDS=4``) lapses and writer B takes it over, on disk B breaks
A's lock the documented way (``break_lock(path, force=True)``, what ``replaybuf unlock --force``
calls); B appends 3 episodes and closes; what the store holds is then read with zarr-python directly
(not through replaybuf); A is continued and waited for (with a time-out).  Then the store must open
writable, ``verify`` must find no error, what zarr-python reads must be what it read when B closed,
and B's 3 episodes must be byte-identical to the arrays B was given.

The slow test runs 20 trials on each; the quick one 1 on each (CI).  ``python
tests/test_stale_writer_fence.py disk|s3 N`` runs N trials by hand and prints each one's outcome.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import StoreLockedError

LEASE_SECONDS = 4
CHUNKS = {"act": (16, 2), "obs": (8, 4, 4)}

# writer A: appends until it is stopped for good; prints "ready" once it committed, exits 3 on
# StoreLockedError (the fence), 4 on anything else (with the traceback on stderr)
WRITER_A = r"""
import logging, sys, time, traceback
import numpy as np
from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import StoreLockedError

refused = []  # writes the server refused (replaybuf_zarr.fenced_store's debug records)
class Count(logging.Handler):
    def emit(self, record):
        refused.append(record.getMessage())
log = logging.getLogger("replaybuf_zarr.fenced_store")
log.setLevel(logging.DEBUG); log.addHandler(Count()); log.propagate = False

path, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(seed)

def episode(i):
    n = int(rng.integers(3, 30))
    return {"act": (1000.0 + i + rng.random((n, 2))).astype(np.float32),
            "obs": rng.integers(0, 200, (n, 4, 4), dtype=np.uint8)}

deadline = time.monotonic() + 120
try:
    rb = ReplayBuffer(path)
    i, told = rb.n_episodes, False
    while time.monotonic() < deadline:
        if i % 3 == 0:
            rb.add_episode(episode(i)); i += 1
        else:
            with rb.writer(commit_interval=0) as w:
                for _ in range(int(rng.integers(1, 4))):
                    w.add_episode(episode(i)); i += 1
        if not told:
            print("ready", flush=True); told = True
except StoreLockedError as exc:
    print(f"fenced ({len(refused)} writes refused by the server):", exc, flush=True)
    sys.exit(3)
except BaseException:
    traceback.print_exc()
    sys.exit(4)
print("deadline", flush=True)
"""


def _b_episodes(seed):
    """B's 3 episodes: values no episode of A takes (negative), lengths A never writes (33..60)."""
    rng = np.random.default_rng(10_000 + seed)
    out = []
    for j in range(3):
        n = int(rng.integers(33, 61))
        out.append({"act": (-1.0 - j - rng.random((n, 2))).astype(np.float32),
                    "obs": rng.integers(201, 256, (n, 4, 4), dtype=np.uint8)})
    return out


def _zarr_root(location):
    """The store opened read-only by zarr-python itself (not through replaybuf)."""
    import zarr

    if location.startswith("s3://"):
        import obstore.store
        from zarr.storage import ObjectStore

        store = ObjectStore(obstore.store.from_url(location), read_only=True)
    else:
        from zarr.storage import LocalStore

        store = LocalStore(location, read_only=True)
    return zarr.open_group(store, mode="r")


def _snapshot(location):
    """``(episode_ends, {key: rows up to episode_ends[-1]})`` as zarr-python reads them."""
    root = _zarr_root(location)
    ends = np.asarray(root["meta"]["episode_ends"][:])
    n = int(ends[-1]) if ends.size else 0
    return ends, {k: np.asarray(root["data"][k][:n]) for k in CHUNKS}


def _create(location, seed):
    rng = np.random.default_rng(seed)
    with ReplayBuffer.create_empty("zarr", location) as rb:
        for i in range(2):
            n = int(rng.integers(5, 20))
            rb.add_episode({"act": np.full((n, 2), 900 + i, np.float32),
                            "obs": np.full((n, 4, 4), i, np.uint8)}, chunks=CHUNKS)


def _take_over(location, deadline):
    """B's writable open once A's lock is gone: on s3:// wait for A's lease to lapse (it is taken
    over); on disk break A's lock with force, as ``replaybuf unlock --force`` does."""
    if not location.startswith("s3://"):
        from replaybuf_core.registry import guess_backend

        guess_backend(location).break_lock(location, force=True)
    while True:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # A's uncommitted rows, trimmed
                return ReplayBuffer(location)
        except StoreLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_trial(location, seed, env=None):
    """One trial (module docstring) on the new store ``location``; returns a one-line outcome and
    raises AssertionError naming what went wrong."""
    rng = np.random.default_rng(seed)
    _create(location, seed)
    env = {**os.environ, **(env or {}), "REPLAYBUF_LEASE_SECONDS": str(LEASE_SECONDS)}
    a = subprocess.Popen([sys.executable, "-c", WRITER_A, location, str(seed)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = a.stdout.readline().strip()
        assert line == "ready", f"writer A did not start: {line!r} {a.stderr.read() if a.poll() is not None else ''}"
        time.sleep(float(rng.uniform(0.0, 0.6)))  # a random instant of A's appends
        a.send_signal(signal.SIGSTOP)
        rb = _take_over(location, time.monotonic() + 4 * LEASE_SECONDS + 30)
        eps = _b_episodes(seed)
        with rb:
            first = rb.n_episodes
            for j, ep in enumerate(eps):
                if j == 1:
                    with rb.writer() as w:
                        w.add_episode(ep)
                else:
                    rb.add_episode(ep)
        ends_b, data_b = _snapshot(location)
        assert ends_b.size == first + 3, f"B committed {ends_b.size - first} episodes, not 3"
        starts = np.concatenate([[0], ends_b])[first:first + 3]
        for j, ep in enumerate(eps):  # B's episodes, read back by zarr-python, are what B was given
            for k in CHUNKS:
                got = data_b[k][starts[j]:ends_b[first + j]]
                assert got.tobytes() == ep[k].tobytes(), f"B's episode {first + j} key {k} read back differs"
    finally:
        a.send_signal(signal.SIGCONT)
        try:
            out, err = a.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            a.kill()
            a.communicate(timeout=30)
            raise AssertionError("writer A did not end within 120 s of SIGCONT") from None
    assert a.returncode in (3, -signal.SIGKILL), f"writer A ended with {a.returncode}: {err[-2000:]}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with ReplayBuffer(location) as rb:  # it opens (and trims what A left past the commit)
            n_after = rb.n_episodes
    from replaybuf_core.inspection.verify import verify_store

    errors = [str(p) for p in verify_store(location) if p.level == "error"]
    assert errors == [], errors
    ends, data = _snapshot(location)
    assert n_after == ends.size
    assert np.array_equal(ends, ends_b), f"episode_ends changed after A went on: {ends_b[-5:]} -> {ends[-5:]}"
    for k in CHUNKS:
        assert data[k].tobytes() == data_b[k].tobytes(), f"committed rows of {k!r} changed after A went on"
    how = out.strip().splitlines()[-1].split(":")[0] if out.strip() else "killed"
    return f"A ended {a.returncode} ({how}); {first} episodes before B, B's 3 intact"


def _trials(new_location, n, base_seed):
    failures = []
    for t in range(n):
        try:
            run_trial(new_location(), base_seed + t)
        except Exception as exc:  # noqa: BLE001 - a store that no longer opens is a failed trial too
            failures.append(f"trial {t}: {type(exc).__name__}: {exc}")
    assert failures == [], f"{len(failures)} of {n} trials failed:\n" + "\n".join(failures)


@pytest.fixture
def disk_location(tmp_path):
    counter = iter(range(10**6))
    return lambda: str(tmp_path / f"store{next(counter)}.zarr")


@pytest.fixture
def s3_location(s3_server, monkeypatch):
    monkeypatch.setenv("REPLAYBUF_LEASE_SECONDS", str(LEASE_SECONDS))
    return s3_server.new_url


def test_a_paused_writer_whose_lock_was_broken_cannot_damage_its_successor_on_disk(disk_location):
    _trials(disk_location, 1, 0)


def test_a_paused_writer_whose_lease_was_taken_over_cannot_damage_its_successor_on_s3(s3_location):
    _trials(s3_location, 1, 0)


def _sleeping_writer(location, env=None):
    """A child holding the writer lock (or lease) of ``location``, asleep; ``ready`` once it does."""
    code = ("import sys, time; from replaybuf_core import ReplayBuffer\n"
            "rb = ReplayBuffer(sys.argv[1]); print('ready', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, location], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_unlock_of_a_local_store_ends_a_stopped_writer_only_with_force(tmp_path, capsys):
    from replaybuf_core.cli import main

    path = str(tmp_path / "s.zarr")
    _create(path, 0)
    assert main(["unlock", path]) == 0 and "no lock to break" in capsys.readouterr().out
    proc = _sleeping_writer(path)
    try:
        proc.send_signal(signal.SIGSTOP)
        assert main(["unlock", path]) == 2  # a live (here stopped) writer: refused, named, left alone
        err = capsys.readouterr().err
        assert f"process {proc.pid} (stopped)" in err and "--force" in err and "kill -CONT" in err
        assert proc.poll() is None
        with pytest.raises(StoreLockedError, match=f"process {proc.pid}"):
            ReplayBuffer(path)
        assert main(["unlock", path, "--force"]) == 0
        assert f"broke the lock held by process {proc.pid} (stopped) (ended with SIGKILL)" in capsys.readouterr().out
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with ReplayBuffer(path) as rb:  # free, with what was committed
        assert rb.n_episodes == 2


def _zarr_json(url, key):
    import json

    import obstore
    import obstore.store

    return json.loads(bytes(obstore.get(obstore.store.from_url(url), key).bytes()))


def test_a_write_sent_after_the_lease_was_taken_over_fails_at_the_server(s3_server, monkeypatch):
    """No check before the write: ``rb.store`` (the backend) writes without asking the lease, as a
    paused writer's write already under way does, and the writer has not noticed the loss (its
    heartbeat is stopped; what it learnt is forgotten before each write).  Each kind of write a commit
    makes is refused by the server once another writer took the lease over: a data array's shape, a
    chunk the other writer rewrote, ``episode_ends``' length, the commit record."""
    monkeypatch.setenv("REPLAYBUF_LEASE_SECONDS", "60")
    url = s3_server.new_url()
    _create(url, 0)
    a = ReplayBuffer(url)  # the writer that will be paused (its lease is broken instead: no waiting)
    a.add_episode({"act": np.ones((5, 2), np.float32), "obs": np.ones((5, 4, 4), np.uint8)})
    a._lock._stop.set()  # its heartbeat is paused too
    from replaybuf_core.cli import main

    assert main(["unlock", url, "--force"]) == 0
    b_code = ("import sys, numpy as np; from replaybuf_core import ReplayBuffer\n"
              "with ReplayBuffer(sys.argv[1]) as rb:\n"
              "    rb.add_episode({'act': np.full((7, 2), -1, np.float32), 'obs': np.full((7, 4, 4), 9, np.uint8)})\n")
    subprocess.run([sys.executable, "-c", b_code, url], check=True, env=dict(os.environ), timeout=120)
    before = _snapshot(url)
    stamped = [_zarr_json(url, k)["attributes"].get("replaybuf_writer")
               for k in ("zarr.json", "data/zarr.json", "meta/zarr.json", "data/act/zarr.json", "data/obs/zarr.json",
                         "meta/episode_ends/zarr.json")]
    assert all(t and len(set(str(x) for x in stamped)) == 1 for t in stamped), stamped  # B's token, everywhere
    s = a.store
    n = a.n_steps
    writes = [lambda: s.resize("data", "act", n + 40),  # a shape
              lambda: s.write("data", "act", n - 2, np.zeros((2, 2), np.float32)),  # the chunk B rewrote
              lambda: s.resize("meta", "episode_ends", a.n_episodes + 1),  # a commit's length
              lambda: s.set_attrs("meta", {"replaybuf_commit": {"n_episodes": 99, "n_steps": 999}})]
    for write in writes:
        a._lock._lost = None  # as if it had not noticed: only the server stands in the way
        with pytest.raises(StoreLockedError, match="lost its lease"):
            write()
    a.close()
    after = _snapshot(url)
    assert np.array_equal(after[0], before[0]) and all(after[1][k].tobytes() == before[1][k].tobytes() for k in CHUNKS)
    with ReplayBuffer.create_from_path(url) as ro:  # B's episode is there, the token is no attribute of the store
        assert ro.episode_lengths[-1] == 7 and "replaybuf_writer" not in ro.store.get_attrs("meta")
        np.testing.assert_array_equal(ro["act"][-7:], np.full((7, 2), -1, np.float32))


@pytest.mark.parametrize("where", ["disk", "s3"])
def test_twenty_sigstop_trials(where, request):
    location = request.getfixturevalue(f"{where}_location")
    _trials(location, 20, 100)


if __name__ == "__main__":  # by hand: python tests/test_stale_writer_fence.py disk|s3 N
    import tempfile

    where, n = sys.argv[1], int(sys.argv[2])
    sys.path.insert(0, os.path.dirname(__file__))
    if where == "s3":
        from s3_helpers import start_s3_server_process, stop_s3_server_process

        proc, endpoint = start_s3_server_process()
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
                           "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
                           "REPLAYBUF_LEASE_SECONDS": str(LEASE_SECONDS)})
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/trials", method="PUT")).read()
        locations = (f"s3://trials/s{i}.zarr" for i in range(n))
    else:
        proc, base = None, tempfile.mkdtemp()
        locations = (os.path.join(base, f"s{i}.zarr") for i in range(n))
    bad = 0
    try:
        for t, loc in enumerate(locations):
            t0 = time.monotonic()
            try:
                print(f"trial {t}: {run_trial(loc, 1000 + t)} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Exception as exc:  # noqa: BLE001
                bad += 1
                print(f"trial {t}: FAILED: {type(exc).__name__}: {exc}", flush=True)
    finally:
        if proc is not None:
            stop_s3_server_process(proc)
    print(f"{bad} of {n} trials failed")
