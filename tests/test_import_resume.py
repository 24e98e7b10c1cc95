"""A killed import on a Dask cluster continues where it stopped when it is run again (issue 51, item 4).

The source: a multi-shard RLDS dataset (8 shards of 5 episodes, written by the test helpers), stored
in spans of 16 rows a key (numbers in chunks of 16 rows, frames in shards of 16: every key's span is
one stored object), so that the committed prefix of a stopped run covers whole spans and whole
shards.  What is checked, and against what:

* the continued store equals the serial import of the same source value for value (every data key,
  ``episode_ends``, every meta array, the episode attributes and tasks), and nothing is left beside it;
* the continued run reads no record of a *finished* shard (one whose episodes all lie in the spans
  before the first span holding rows past the committed prefix): observed apart from the import's own
  bookkeeping — in-process, every shard reader the RLDS source makes (``RecordReader``) and every
  shard it indexes; in the kill trial's subprocesses (the CLI and its Dask workers), every ``open`` of a
  shard file, from a Python audit hook a ``sitecustomize`` installs in each process;
* a build made by another plan (other ``--frames``), a ``--restart``, and a live process's build are
  not continued: the import starts over and is right, and a live process's build is left as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("google.protobuf")
pytest.importorskip("distributed")

from replaybuf_core import ReplayBuffer, import_dataset  # noqa: E402
from replaybuf_core.importing import distributed as distributed_mod  # noqa: E402
from replaybuf_core.importing import plan as plan_mod  # noqa: E402
from replaybuf_core.importing.resume import PROGRESS_FILE  # noqa: E402
from replaybuf_core.testing.rlds_writer import write_rlds  # noqa: E402

FEATURES = {
    "steps/is_first": ("tensor", np.bool_, ()),
    "steps/is_last": ("tensor", np.bool_, ()),
    "steps/action": ("tensor", np.float32, (3,)),
    "steps/observation/cam": ("image", np.uint8, (16, 20, 3), "png"),
    "steps/observation/joints": ("tensor", np.float64, (2,), "bytes"),
    "steps/language_instruction": ("text",),
    "episode_metadata/name": ("text",),
}
SHARDS, PER_SHARD = 8, 5
N_EPISODES = SHARDS * PER_SHARD
ROWS = 16  # rows of every key's stored object, hence of every span (SPAN_BYTES = 1)


def _episode(i: int) -> dict:
    t = 9 + (i * 7) % 11
    rng = np.random.default_rng(i)
    return {
        "steps/is_first": np.arange(t) == 0, "steps/is_last": np.arange(t) == t - 1,
        "steps/action": rng.normal(size=(t, 3)).astype(np.float32),
        "steps/observation/cam": rng.integers(0, 256, (t, 16, 20, 3), dtype=np.uint8),
        "steps/observation/joints": rng.normal(size=(t, 2)),
        "steps/language_instruction": [f"task {i % 3}"] * t,
        "episode_metadata/name": f"episode {i}",
    }


LENGTHS = [len(_episode(i)["steps/is_first"]) for i in range(N_EPISODES)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The source, its index cache (shared by every process of these tests) and the serial import."""
    root = write_rlds(tmp_path_factory.mktemp("src") / "ds", FEATURES, [_episode(i) for i in range(N_EPISODES)],
                      shards=SHARDS)
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("REPLAYBUF_CACHE")
    os.environ["REPLAYBUF_CACHE"] = str(cache)
    try:
        serial = tmp_path_factory.mktemp("serial") / "serial.zarr"
        assert import_dataset(root, serial, "rlds", progress=False).ok
    finally:
        if old is None:
            os.environ.pop("REPLAYBUF_CACHE")
        else:
            os.environ["REPLAYBUF_CACHE"] = old
    return root, cache, serial


@pytest.fixture
def small_spans(monkeypatch, dataset):
    """Spans of one stored object (SPAN_BYTES = 1) and numbers in chunks of ROWS rows: every span is ROWS rows."""
    monkeypatch.setenv("REPLAYBUF_CACHE", str(dataset[1]))
    monkeypatch.setattr(distributed_mod, "SPAN_BYTES", 1)
    real = plan_mod.get_optimal_chunks
    monkeypatch.setattr(plan_mod, "get_optimal_chunks", lambda shape, dtype, *a, **k: real(shape, dtype, max_chunk_length=ROWS))


@pytest.fixture
def local_client():
    """A Dask cluster in this process (threads): starts in a moment, sees the monkeypatches."""
    from distributed import Client, LocalCluster

    # one thread: spans complete in order, so the committed prefix ends where the test expects (two
    # threads sharing one source are tested in test_import_rlds.py)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def _same_values(a: Path, b: Path, n_episodes: int | None = None) -> None:
    """Store ``a`` equals store ``b`` (its first ``n_episodes``) value for value."""
    with ReplayBuffer.create_from_path(a) as x, ReplayBuffer.create_from_path(b) as y:
        n = y.n_episodes if n_episodes is None else n_episodes
        assert x.n_episodes == n
        assert np.array_equal(x.episode_ends, y.episode_ends[:n])
        rows = int(y.episode_ends[n - 1])
        assert sorted(x.keys()) == sorted(y.keys())
        for key in y.keys():
            got, want = x.store.read("data", key, 0, x.n_steps), y.store.read("data", key, 0, rows)
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert np.array_equal(got, want) if got.dtype == object else got.tobytes() == want.tobytes(), key
        assert sorted(x.store.list_arrays("meta")) == sorted(y.store.list_arrays("meta"))
        for name in y.store.list_arrays("meta"):
            if name in ("episode_ends", "replaybuf_stats") or name.startswith("replaybuf_stats"):
                continue
            got = x.store.read("meta", name, 0, x.store.shape("meta", name)[0])
            want = y.store.read("meta", name, 0, y.store.shape("meta", name)[0])
            if x.store.shape("meta", name)[0] == x.n_episodes and n != y.n_episodes:
                want = want[:n]
            assert np.array_equal(got, want), name
        attrs = [json.loads(s) for s in x.store.read("meta", "episode_attrs", 0, n)]
        assert [a["episode_metadata"]["name"] for a in attrs] == [f"episode {i}" for i in range(n)]
        assert [a["tasks"] for a in attrs] == [[f"task {i % 3}"] for i in range(n)]
        assert x.store.get_attrs("data")["source_attrs"]["tasks"] == y.store.get_attrs("data")["source_attrs"]["tasks"]


def _finished_shards(committed: int) -> set[int]:
    """Shards whose episodes all end at or before the first span holding rows past ``committed`` episodes."""
    ends = np.cumsum(LENGTHS)
    first = (int(ends[committed - 1]) // ROWS) * ROWS
    return {s for s in range(SHARDS) if ends[(s + 1) * PER_SHARD - 1] <= first}


def _shard_number(path: str) -> int:
    return int(Path(path).name.split("tfrecord-")[1].split("-of-")[0])


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=60)
    return p.pid


def _stopped_build(dataset, tmp_path, monkeypatch, client, stop_after: int, **kwargs) -> Path:
    """A build as a process killed after committing ``stop_after`` episodes or more leaves it: the import
    is cut at a commit (after its rows of later spans were written) and its build kept, renamed to a
    dead process's."""
    from replaybuf_core.store import replace

    root = dataset[0]
    monkeypatch.setattr(distributed_mod, "COMMIT_INTERVAL", 0.0)
    cls = ReplayBuffer
    real_commit = cls._commit_episode_ends

    class Killed(Exception):
        pass

    def commit(self, ends):
        if self.n_episodes >= stop_after:
            raise Killed
        real_commit(self, ends)

    kept = []
    with monkeypatch.context() as m:
        m.setattr(cls, "_commit_episode_ends", commit)
        m.setattr(replace, "_remove", lambda path: kept.append(path))  # the build stays, as after SIGKILL
        with pytest.raises(Killed):
            import_dataset(root, tmp_path / "dst.zarr", "rlds", progress=False, client=client, **kwargs)
    builds = [p for p in tmp_path.iterdir() if p.name.startswith(".dst.zarr.building-")]
    assert len(builds) == 1
    dead = tmp_path / f".dst.zarr.building-{_dead_pid()}-0badc0de"
    os.rename(builds[0], dead)
    return dead


def _committed(build: Path) -> int:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with ReplayBuffer.create_from_path(build, backend="zarr") as ro:
            return ro.n_episodes


class _Reads:
    """Every shard the RLDS source reads records of (its readers) or indexes, in this process."""

    def __init__(self, monkeypatch):
        from replaybuf_core.formats.rlds import source as rlds_source

        self.shards: list[int] = []
        outer = self

        class Reader(rlds_source.RecordReader):
            def __init__(self, path):
                outer.shards.append(_shard_number(os.fspath(path)))
                super().__init__(path)

        real_iter = rlds_source.iter_records
        monkeypatch.setattr(rlds_source, "RecordReader", Reader)
        monkeypatch.setattr(rlds_source, "iter_records", lambda p, **k: outer.shards.append(_shard_number(p))
                            or real_iter(p, **k))


def test_a_stopped_import_continues_without_reading_its_finished_shards(dataset, small_spans, local_client,
                                                                      tmp_path, monkeypatch):
    """The fast variant of the kill trial (one process, a cluster on threads)."""
    root, _, serial = dataset
    build = _stopped_build(dataset, tmp_path, monkeypatch, local_client, stop_after=20)
    k = _committed(build)
    assert 20 <= k < N_EPISODES
    finished = _finished_shards(k)
    assert len(finished) >= 2
    reads = _Reads(monkeypatch)
    report = import_dataset(root, tmp_path / "dst.zarr", "rlds", progress=False, client=local_client)
    assert report.ok, report.problems
    assert reads.shards and not finished & set(reads.shards), (sorted(finished), sorted(set(reads.shards)))
    assert set(range(SHARDS)) - finished <= set(reads.shards)  # the others were read: the observation works
    assert report.resumed == (k, N_EPISODES)
    assert f"resumed: {k} of {N_EPISODES} episodes were already imported" in report.summary()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst.zarr"]
    assert not (tmp_path / "dst.zarr" / PROGRESS_FILE).exists()
    _same_values(tmp_path / "dst.zarr", serial)


def test_a_build_of_another_plan_or_a_restart_starts_over(dataset, small_spans, local_client, tmp_path, monkeypatch):
    """Other frames: the stopped build is removed and the import starts from the first episode; the
    same with resume=False for the same plan."""
    root, _, serial = dataset
    _stopped_build(dataset, tmp_path, monkeypatch, local_client, stop_after=10)
    reads = _Reads(monkeypatch)
    report = import_dataset(root, tmp_path / "dst.zarr", "rlds", progress=False, client=local_client, frames="fast")
    assert report.ok and report.resumed is None, report.problems
    assert 0 in reads.shards  # read again from the start
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst.zarr"]
    with ReplayBuffer.create_from_path(tmp_path / "dst.zarr") as rb, ReplayBuffer.create_from_path(serial) as want:
        assert np.array_equal(rb.episode_ends, want.episode_ends)
        assert np.array_equal(rb.store.read("data", "action", 0, rb.n_steps), want.store.read("data", "action", 0, rb.n_steps))
        assert "jpeg" in str(rb.store.codec("data", "observation.cam")).lower()
    shutil.rmtree(tmp_path / "dst.zarr")
    _stopped_build(dataset, tmp_path, monkeypatch, local_client, stop_after=10)
    report = import_dataset(root, tmp_path / "dst.zarr", "rlds", progress=False, client=local_client, resume=False)
    assert report.ok and report.resumed is None, report.problems
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst.zarr"]
    _same_values(tmp_path / "dst.zarr", serial)


def test_a_live_processs_build_is_never_taken(dataset, small_spans, local_client, tmp_path, monkeypatch):
    """A build whose process runs (here: a sleeping one's pid) is left as it was, file for file; the
    import builds its own."""
    from replaybuf_core.testing.files import file_digests

    root, _, serial = dataset
    dead = _stopped_build(dataset, tmp_path, monkeypatch, local_client, stop_after=10)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        live = tmp_path / f".dst.zarr.building-{sleeper.pid}-0badc0de"
        os.rename(dead, live)
        before = file_digests(live)
        report = import_dataset(root, tmp_path / "dst.zarr", "rlds", progress=False, client=local_client)
        assert report.ok and report.resumed is None, report.problems
        assert file_digests(live) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["dst.zarr", live.name])
        _same_values(tmp_path / "dst.zarr", serial)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=60)


# ------------------------------------------------------------------------------------ the kill trial
SITECUSTOMIZE = '''
import os, sys, time
_log = os.environ.get("RESUME_TEST_OPENS")
_slow = float(os.environ.get("RESUME_TEST_SLOW_OPEN", "0"))
if _log:
    def _hook(event, args, _log=_log, _slow=_slow):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if ".tfrecord-" in path:
                with open(_log, "a") as f:
                    f.write(path + "\\n")
                if _slow:
                    time.sleep(_slow)  # a slow disk: the kill lands mid-run
    sys.addaudithook(_hook)
'''
RUN = '''
import sys

if __name__ == "__main__":  # (the workers' processes are spawned: they import this module again)
    from replaybuf_core.importing import distributed, plan
    distributed.SPAN_BYTES = 1
    real = plan.get_optimal_chunks
    plan.get_optimal_chunks = lambda shape, dtype, *a, **k: real(shape, dtype, max_chunk_length=%d)
    from replaybuf_core.cli import main
    sys.exit(main(sys.argv[1:]))
''' % ROWS


def _opened(log: Path) -> set[int]:
    return {_shard_number(p) for p in log.read_text().split()} if log.exists() else set()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_killed_cli_import_on_local_workers_continues(dataset, tmp_path, signum):
    """``replaybuf import rlds SRC DST --workers 2`` SIGKILLed (with its workers: the process group)
    after some commits, then run again: it says it resumed, opens no finished shard (audit hook in
    every process), and its store is the serial import's, value for value, with nothing left beside.
    SIGTERM (``kill``, a scheduler's preemption of the command) and Ctrl-C (SIGINT to the group, as a
    terminal sends it) end it with one line and 143 / 130, and keep its build for the next run as
    SIGKILL does."""
    root, cache, serial = dataset
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "run.py").write_text(RUN)
    out = tmp_path / "out"
    out.mkdir()
    here = Path(__file__).resolve().parents[1]
    env = {**os.environ, "REPLAYBUF_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([str(site), str(here), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(tmp_path / "run.py"), "import", "rlds", str(root), str(out / "dst.zarr"),
           "--workers", "2", "--frames-per-shard", str(ROWS), "--no-progress"]
    first = subprocess.Popen(cmd, env={**env, "RESUME_TEST_OPENS": str(tmp_path / "first.log"),
                                       "RESUME_TEST_SLOW_OPEN": "0.05"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline, k = time.monotonic() + 180, 0
        while time.monotonic() < deadline and first.poll() is None and k < 16:
            builds = list(out.glob(".dst.zarr.building-*"))
            try:
                k = _committed(builds[0]) if builds else 0
            except Exception:  # noqa: BLE001 - being created
                k = 0
            time.sleep(0.1)
        assert first.poll() is None, f"the import ended before it could be killed: {first.communicate()}"
        assert k >= 16, "no commit in time"
        if signum == signal.SIGTERM:
            os.kill(first.pid, signum)  # `kill PID`: the command only (its workers go with its cluster)
        else:
            os.killpg(first.pid, signum)  # SIGKILL with the workers; SIGINT as a terminal sends it
        _, err = first.communicate(timeout=120)
        if signum != signal.SIGKILL:
            want = {signal.SIGTERM: (143, "terminated (SIGTERM)"), signal.SIGINT: (130, "interrupted")}[signum]
            assert (first.returncode, err.decode().strip()) == (want[0], f"replaybuf import: {want[1]}"), err
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate(timeout=60)
    builds = list(out.glob(".dst.zarr.building-*"))
    assert len(builds) == 1 and not (out / "dst.zarr").exists()
    k = _committed(builds[0])
    again = subprocess.run(cmd, env={**env, "RESUME_TEST_OPENS": str(tmp_path / "again.log")},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    finished = _finished_shards(k)
    opened = _opened(tmp_path / "again.log")
    assert len(finished) >= 2 and not finished & opened, (sorted(finished), sorted(opened))
    assert set(range(SHARDS)) - finished <= opened  # the rest were read: the observation works
    assert f"resumed: {k} of {N_EPISODES} episodes were already imported" in again.stdout, again.stdout
    assert sorted(p.name for p in out.iterdir()) == ["dst.zarr"]
    _same_values(out / "dst.zarr", serial)
