"""Read-only opens change nothing on disk; one writer process per store (advisory lock), many readers.

* a battery of reads and failed writes on ``create_from_path`` — including of a store that needs
  recovery — leaves the directory tree (names and bytes) identical;
* a writable open of a LocalStore takes ``<store>/.replaybuf.lock``; a second writer *process* gets
  StoreLockedError naming the holder's pid; ``close()`` / ``with`` / process death release it;
* 4 reader processes (fork and spawn) sampling windows get exactly what one process gets, also when
  the parent read from the store before forking (the chunk reader's descriptors and thread pool).
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import ReadOnlyError, StoreLockedError
from replaybuf_core.locking import LOCK_NAME
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.testing import assert_buffer_equal, make_episode


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def _make(path: Path, lengths=(5, 7, 3, 9)):
    eps = [make_episode(n, seed=i, strings=True) for i, n in enumerate(lengths)]
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for ep in eps:
            rb.add_episode(ep, chunks={"obs": (4, 3), "action": (4,), "label": (4,)})
    return eps


def _damage(path: Path) -> None:
    """Leave the traces of three interrupted writes (append, commit, rechunk swap)."""
    with ReplayBuffer(str(path)) as rb:
        s = rb.store
        for key in rb.keys():
            arr = s.get_array("data", key)
            arr.resize((arr.shape[0] + 3,) + arr.shape[1:])
        s.get_array("meta", "episode_ends").resize((rb.n_episodes + 1,))
        s.create_array("data", "_temp.obs", shape=(2, 3), dtype=np.dtype(np.float32))


@pytest.mark.parametrize("needs_recovery", [False, True], ids=["clean", "needs-recovery"])
def test_read_only_changes_nothing_on_disk(tmp_path, needs_recovery):
    path = tmp_path / "b.zarr"
    eps = _make(path)
    if needs_recovery:
        _damage(path)
    before = _tree(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ro = ReplayBuffer.create_from_path(path)
    assert ro.read_only and ro.keys() == ["action", "label", "obs"]
    assert_buffer_equal(ro, eps)
    ro.get_steps_slice(2, 20, 3)
    ro.read_ranges("obs", [0, 5], [4, 24])
    assert np.asarray(ro["obs"]).shape == (24, 3) and ro["label"][-1] == eps[-1]["label"][-1]
    sampler = SequenceSampler(ro, sequence_length=4, pad_before=1, pad_after=1)
    sampler.sample_batch(np.arange(len(sampler)))
    ro.warm()
    ro.episode_lengths, ro.get_episode_idxs(), repr(ro), ro.chunk_size, ro.get_chunks(), ro.get_compressors()
    writes = [
        lambda: ro.add_episode(make_episode(2, seed=9, strings=True)),
        lambda: ro.drop_episode(),
        lambda: ro.pop_episode(),
        lambda: ro.update_meta({"x": 1}),
        lambda: ro.set_chunks({"obs": (2, 3)}),
        lambda: ro.set_compressors({"obs": "disk"}),
        lambda: ro.writer(),
        lambda: ro.store.resize("data", "obs", 2),
        lambda: ro.store.write("data", "obs", 0, np.zeros((1, 3), np.float32)),
        lambda: ro.store.delete_array("data", "obs"),
    ]
    for write in writes:
        with pytest.raises(ReadOnlyError, match="read-only"):
            write()
    ro.close()
    assert _tree(path) == before
    assert not (path / LOCK_NAME).exists() or LOCK_NAME in before


def _try_open_writable(path: str) -> str:
    code = ("import sys\nfrom replaybuf_core import ReplayBuffer\nfrom replaybuf_core.errors import StoreLockedError\n"
            "try:\n    ReplayBuffer(sys.argv[1]).close(); print('opened')\n"
            "except StoreLockedError as e:\n    print('locked:', e)\n")
    return subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True).stdout


def _try_read(path: str) -> str:
    code = ("import sys\nfrom replaybuf_core import ReplayBuffer\n"
            "print(ReplayBuffer.create_from_path(sys.argv[1]).n_episodes)\n")
    return subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True).stdout


def test_one_writer_many_readers(tmp_path):
    path = tmp_path / "b.zarr"
    _make(path)
    rb = ReplayBuffer(str(path))
    out = _try_open_writable(str(path))
    assert out.startswith("locked:") and f"process {os.getpid()}" in out and LOCK_NAME in out
    assert _try_read(str(path)).strip() == "4"  # readers take no lock
    again = ReplayBuffer(str(path))  # same process: shares the lock
    again.close()
    assert _try_open_writable(str(path)).startswith("locked:")  # rb still holds it
    rb.close()
    rb.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        rb.add_episode(make_episode(2, strings=True))
    assert _try_open_writable(str(path)).strip() == "opened"
    with ReplayBuffer(str(path)) as rb2:
        assert _try_open_writable(str(path)).startswith("locked:")
        rb2.add_episode(make_episode(2, seed=4, strings=True))
    assert _try_open_writable(str(path)).strip() == "opened"


def test_lock_released_when_holder_is_killed(tmp_path):
    path = tmp_path / "b.zarr"
    _make(path)
    code = ("import sys, time\nfrom replaybuf_core import ReplayBuffer\nrb = ReplayBuffer(sys.argv[1])\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match=f"process {proc.pid}"):
            ReplayBuffer(str(path))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with ReplayBuffer(str(path)) as rb:
        assert rb.n_episodes == 4


def _fork_child_open(path, q):
    try:
        ReplayBuffer(path)
        q.put("opened")
    except StoreLockedError as exc:
        q.put(f"locked: {exc}")


def test_forked_child_is_not_a_second_writer(tmp_path):
    path = tmp_path / "b.zarr"
    _make(path)
    ctx = mp.get_context("fork")
    with ReplayBuffer(str(path)):
        q = ctx.Queue()
        p = ctx.Process(target=_fork_child_open, args=(str(path), q))
        p.start()
        p.join(60)
        if p.exitcode is None:  # hung (issue 47: a fork child after video reads): never leave it behind
            p.kill()
            p.join(5)
            pytest.fail("the forked child did not finish in 60 s")
        assert q.get(timeout=5).startswith(f"locked: {path}") and p.exitcode == 0
    # the child's exit did not release the lock early, and the parent's close did
    assert _try_open_writable(str(path)).strip() == "opened"


# ------------------------------------------------------------------------------- many reader processes
_WORKER_BUFFER = None


def _sample(args):
    path, idx = args
    global _WORKER_BUFFER
    if _WORKER_BUFFER is None or _WORKER_BUFFER[0] != path:
        _WORKER_BUFFER = (path, ReplayBuffer.create_from_path(path))
    sampler = SequenceSampler(_WORKER_BUFFER[1], sequence_length=6, pad_before=2, pad_after=3)
    return sampler.sample_batch(idx)


def _sample_inherited(idx):
    return _INHERITED.sample_batch(idx)


_INHERITED = None


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_reader_processes_sample_like_one_process(tmp_path, method):
    global _INHERITED
    path = tmp_path / "b.zarr"
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 40, size=30)
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for i, n in enumerate(lengths):
            ep = make_episode(int(n), seed=i)
            ep["img"] = rng.integers(0, 255, size=(int(n), 8, 8, 3), dtype=np.uint8)
            rb.add_episode(ep, chunks={"obs": (16, 3), "action": (16,), "img": (16, 8, 8, 3)})
    ro = ReplayBuffer.create_from_path(path)
    sampler = SequenceSampler(ro, sequence_length=6, pad_before=2, pad_after=3)
    batches = [rng.integers(0, len(sampler), size=64) for _ in range(8)]
    expected = [sampler.sample_batch(b) for b in batches]  # the parent has read: caches, fds, pool warm
    ctx = mp.get_context(method)
    with ctx.Pool(4) as pool:
        got = pool.map(_sample, [(str(path), b) for b in batches])
    if method == "fork":  # workers also use the parent's already-open buffer and sampler
        _INHERITED = sampler
        try:
            with ctx.Pool(4) as pool:
                got_inherited = pool.map(_sample_inherited, batches)
        finally:
            _INHERITED = None
        got = got + got_inherited
        expected = expected + expected
    for e, g in zip(expected, got):
        assert sorted(e) == sorted(g)
        for k in e:
            assert e[k].dtype == g[k].dtype and e[k].tobytes() == g[k].tobytes(), k
