"""Fault injection: kill a writing process with SIGKILL at a random moment, then check the store.

Used by ``tests/test_crash_safety.py`` (a few kills per kind) and ``benchmarks/soak.py`` (many).  The
child is ``python -m replaybuf_core.testing.crash KIND PATH``: it opens the LocalStore buffer at PATH,
prints ``ready``, then repeats one operation forever, printing ``done <n_episodes>`` after each call
returns.  The parent kills it after a random delay (or the child kills itself right after its N-th
file operation: :mod:`.file_op_kill`) and checks (:func:`run_trial`) that the store opens,
that every committed episode is bit-exact (episode ``i`` is :func:`episode`\\ ``(i)``, so the parent can
rebuild it), that at most the episode in flight is missing, and that appending continues.

Kinds: ``add_episode``, ``writer`` (``EpisodeWriter``), ``writer_frames`` (``EpisodeWriter`` on a store
with one-frame ``img`` chunks, so blocks are encoded in the background, committing every 20 ms),
``drop_episode``, ``pop_episode``,
``set_chunks``, ``set_compressors``, ``rechunk_recompress`` (the seed's ``rechunk_recompress_array``),
``delete_episodes`` (an edit deleting episode 1 again and again) and ``delete_frames`` (the same on a
store whose ``img`` frames a lossless frame codec stores, ``exact``, in shards of 8 frames: the edit
moves them as stored bytes, its backup hard-linked, its re-cut shards stored on the codec pool while
the next are cut).

Any persistent backend can be tried: :func:`create` takes its name and the child opens the path with
whichever backend claims it (a directory: zarr; ``.h5``: hdf5).  :data:`BACKEND_KINDS` are the kinds
every backend must survive (the rechunk ones need chunks and zarr's rechunker);
:class:`replaybuf_core.testing.conformance.CrashConformance` runs them in a backend's own tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

from replaybuf_core.layout.keys import is_temp_name
from replaybuf_core.store.buffer import ReplayBuffer

from . import file_op_kill

KINDS = ("add_episode", "writer", "writer_frames", "drop_episode", "pop_episode", "set_chunks", "set_compressors",
         "rechunk_recompress", "delete_episodes", "delete_frames")
#: edits (:mod:`replaybuf_core.store.editing`): the child deletes episode 1 again and again
EDIT_KINDS = ("delete_episodes", "delete_frames")
APPEND_KINDS = ("add_episode", "writer", "writer_frames")
#: the kinds a third-party persistent backend is held to (no zarr-only operation)
SHRINK_KINDS = ("drop_episode", "pop_episode")
BACKEND_KINDS = ("add_episode", "writer", "drop_episode", "pop_episode")
KEYS = ("action", "img", "label", "obs")
CHUNKS = {"obs": (8, 4), "action": (8, 2), "img": (8, 6, 6, 3), "label": (8,)}
#: ``writer_frames``: one frame a chunk, as camera frames are stored (writes of many chunks run on the pool)
FRAME_CHUNKS = dict(CHUNKS, img=(1, 6, 6, 3))
#: ``delete_frames``: ``img`` stored by a lossless frame codec (rows moved as stored bytes), 8 frames a shard
FRAMES, FRAMES_PER_SHARD = "img=exact", 8
#: the parent tops a store up to this many episodes before a shrink trial, trims it past MAX_EPISODES
MIN_EPISODES, MAX_EPISODES = 40, 300


def episode(i: int) -> dict[str, np.ndarray]:
    """Episode ``i`` of the fault-injection buffers, a pure function of ``i``: 3..13 steps of ``obs``
    float32 (T, 4), ``action`` int64 (T, 2), ``img`` uint8 (T, 6, 6, 3), ``label`` str (T,)."""
    n = 3 + (i * 7) % 11
    rng = np.random.default_rng(i)
    return {
        "obs": rng.standard_normal((n, 4)).astype(np.float32),
        "action": rng.integers(-2**40, 2**40, size=(n, 2), dtype=np.int64),
        "img": rng.integers(0, 256, size=(n, 6, 6, 3), dtype=np.uint8),
        "label": np.array([f"ep{i}-step{t}-é" for t in range(n)], dtype=object),
    }


def expected_steps(n_episodes: int, ids: list[int] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(episode_ends int64 (n,), key → concatenated rows) of episodes ``0..n-1`` (or of ``ids``)."""
    eps = [episode(i) for i in (range(n_episodes) if ids is None else ids)]
    ends = np.cumsum([len(e["obs"]) for e in eps], dtype=np.int64)
    data = {k: (np.concatenate([e[k] for e in eps]) if eps else episode(0)[k][:0]) for k in KEYS}
    return ends, data


def create(path: str | os.PathLike, n_episodes: int = MIN_EPISODES, kind: str | None = None,
           backend: str = "zarr") -> None:
    """A fresh buffer on ``backend`` at ``path`` (a zarr LocalStore directory by default) holding
    episodes ``0..n_episodes-1`` (chunks of 8 rows; one-frame ``img`` chunks for ``kind="writer_frames"``;
    :data:`FRAMES` in shards of :data:`FRAMES_PER_SHARD` for ``kind="delete_frames"``)."""
    chunks = FRAME_CHUNKS if kind == "writer_frames" else CHUNKS
    with ReplayBuffer.create_empty(backend, os.fspath(path)) as rb:
        if kind == "delete_frames":
            with rb.writer(chunks={k: c for k, c in CHUNKS.items() if k != "img"}, frames=FRAMES,
                           frames_per_shard=FRAMES_PER_SHARD) as w:
                for i in range(n_episodes):
                    w.add_episode(episode(i))
            return
        for i in range(n_episodes):
            rb.add_episode(episode(i), chunks=chunks)


# ---------------------------------------------------------------------------------------------- child
def _child(kind: str, path: str) -> None:  # pragma: no cover - runs in a subprocess
    killer = file_op_kill.from_environment()  # a kill after the N-th file operation, not at a time
    rb = ReplayBuffer(path)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    if killer is not None:
        killer.start()
    j = 0
    if kind == "add_episode":
        while rb.n_episodes < MAX_EPISODES + 100:
            rb.add_episode(episode(rb.n_episodes))
            out.write(f"done {rb.n_episodes}\n")
            out.flush()
    elif kind in ("writer", "writer_frames"):
        with rb.writer(commit_interval=0.02 if kind == "writer_frames" else 1.0) as w:
            i = rb.n_episodes
            while i < MAX_EPISODES + 100:
                w.add_episode(episode(i))
                i += 1
                out.write(f"done {rb.n_episodes}\n")  # committed so far (staged ones are in flight)
                out.flush()
    elif kind in SHRINK_KINDS:
        while rb.n_episodes > 1:
            if kind == "pop_episode":
                n = rb.n_episodes
                ep = rb.pop_episode()
                assert all(np.array_equal(ep[k], episode(n - 1)[k]) for k in ("obs", "action", "img"))
            else:
                rb.drop_episode()
            out.write(f"done {rb.n_episodes}\n")
            out.flush()
    elif kind in EDIT_KINDS:
        deleted = 0
        while rb.n_episodes > 2:
            rb.delete_episodes([1])
            deleted += 1
            out.write(f"done {deleted}\n")
            out.flush()
    elif kind in ("set_chunks", "set_compressors", "rechunk_recompress"):
        from replaybuf_core.store.rechunk import rechunk_recompress_array

        while True:
            c = (4, 16, 8)[j % 3]
            preset = ("disk", None, "default")[j % 3]
            if kind == "set_chunks":
                rb.set_chunks({k: (c,) + tuple(rb.store.shape("data", k)[1:]) for k in KEYS})
            elif kind == "set_compressors":
                rb.set_compressors({"obs": preset, "action": preset, "img": preset})
            else:
                for k in ("obs", "img", "label"):
                    rechunk_recompress_array(rb.data, k, chunk_length=c,
                                             compressor=preset if k != "label" else None)
            j += 1
            out.write(f"done {rb.n_episodes}\n")
            out.flush()
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    out.write("exhausted\n")
    out.flush()
    if killer is None:  # (the parent kills it)
        time.sleep(60)


# --------------------------------------------------------------------------------------------- parent
@dataclass
class TrialResult:
    """One kill: ``clean_open`` (the store opened and held exactly the committed episodes, bit-exact,
    and an append succeeded), ``lost`` (committed episodes missing beyond the one in flight),
    ``done`` (calls that returned before the kill), ``error`` (what went wrong, if anything)."""

    kind: str
    clean_open: bool
    lost: int
    done: int
    error: str | None = None


def _open_quiet(path: str, **kw) -> ReplayBuffer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the recovery warning is expected after a kill
        return ReplayBuffer(path, **kw)


def _check_content(rb: ReplayBuffer, n: int, ids: list[int] | None = None) -> str | None:
    ends, data = expected_steps(n, ids)
    if rb.n_episodes != n:
        return f"{rb.n_episodes} episodes, expected {n}"
    if not np.array_equal(rb.episode_ends, ends):
        return "episode_ends differ from the committed episodes"
    if sorted(rb.keys()) != sorted(KEYS) or any(is_temp_name(k) for k in rb.store.list_arrays("data")):
        return f"data keys are {rb.store.list_arrays('data')}"
    got = rb.get_steps_slice(None, None, copy=True)
    for k in KEYS:
        a, e = got[k], data[k]
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"{k}: {a.shape} {a.dtype} != {e.shape} {e.dtype}"
        if (a.tolist() != e.tolist()) if e.dtype == object else (a.tobytes() != e.tobytes()):
            return f"{k}: content differs"
    return None


def _check_last_version(rb: ReplayBuffer) -> str | None:
    """An edit records its version in its commit: the last version of the log must describe the store."""
    from replaybuf_core.store import versions

    log = versions.log(rb.store)
    if log and (int(log[-1]["n_episodes"]), int(log[-1]["n_steps"])) != (rb.n_episodes, rb.n_steps):
        return (f"the last version ({log[-1]['id']}: {log[-1]['n_episodes']} episodes, {log[-1]['n_steps']} steps) "
                f"is not the store ({rb.n_episodes} episodes, {rb.n_steps} steps)")
    return None


def _break_dead_writers_lease(path: str | os.PathLike) -> None:
    """On object storage the killed child's lease outlives it (no server notices a death): break it,
    as an operator does with ``replaybuf unlock`` once the writer is known dead."""
    from replaybuf_core.locations import is_object_url

    if is_object_url(path):
        from replaybuf_core.registry import guess_backend

        guess_backend(path).break_lock(os.fspath(path))


def run_trial(kind: str, path: str | os.PathLike, rng: np.random.Generator, max_delay: float = 0.25,
              timeout: float = 60.0, after_file_ops: int | None = None) -> TrialResult:
    """Run the ``kind`` child on the buffer at ``path`` (created by :func:`create`), SIGKILL it after
    ``rng.uniform(0, max_delay)`` seconds of work — or, with ``after_file_ops`` N, let it kill itself
    right after its N-th file operation (:mod:`.file_op_kill`; one that runs out of work first ends) —
    then reopen and check (see module doc)."""
    path = os.fspath(path)
    if kind in EDIT_KINDS:  # episodes 0..MIN_EPISODES-1 afresh: an edit renumbers them
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        create(path, MIN_EPISODES, kind=kind)
    try:
        rb = _open_quiet(path)
    except Exception as exc:  # noqa: BLE001 - a store an earlier kill left unopenable
        return TrialResult(kind, False, 0, 0, f"open failed before the trial: {type(exc).__name__}: {exc}")
    with rb:  # bring the store to a state the trial can work on
        if kind in SHRINK_KINDS:
            while rb.n_episodes < MIN_EPISODES:
                rb.add_episode(episode(rb.n_episodes))
        while rb.n_episodes > MAX_EPISODES:
            rb.drop_episode()
        before = rb.n_episodes
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if after_file_ops is not None:
        env[file_op_kill.ENV] = str(int(after_file_ops))
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.testing.crash", kind, path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stdout.readline().strip()
        if first != "ready":
            proc.kill()
            _, err = proc.communicate(timeout=timeout)
            return TrialResult(kind, False, 0, 0, f"child failed to start: {first!r} {err[-500:]}")
        if after_file_ops is None:
            time.sleep(float(rng.uniform(0.0, max_delay)))
            proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = rest.split()
    dones = [int(x) for a, x in zip(lines, lines[1:]) if a == "done"]
    if "Traceback" in err:
        return TrialResult(kind, False, 0, len(dones), f"child raised: {err[-800:]}")
    committed = dones[-1] if dones else (0 if kind in EDIT_KINDS else before)
    _break_dead_writers_lease(path)
    try:
        rb = _open_quiet(path)
    except Exception as exc:  # noqa: BLE001 - a failed open is the result
        return TrialResult(kind, False, committed, len(dones), f"open failed: {type(exc).__name__}: {exc}")
    try:
        with rb:
            return _judge(kind, rb, before, committed, len(dones))
    except Exception as exc:  # noqa: BLE001 - a committed episode that does not read back is the result
        return TrialResult(kind, False, committed, len(dones), f"reading back failed: {type(exc).__name__}: {exc}")


def _judge(kind: str, rb: ReplayBuffer, before: int, committed: int, done: int) -> TrialResult:
    """Compare the reopened store with what the child had committed; then append once more."""
    n = rb.n_episodes
    if kind in EDIT_KINDS:  # ``committed`` deletes of episode 1 returned; one more may have landed
        states = {d: [0] + list(range(1 + d, before)) for d in (committed, committed + 1)}
        d = before - n
        if d not in states:
            return TrialResult(kind, False, max(0, before - committed - n), done,
                               f"{n} episodes after the kill; {committed} deletes had returned")
        problem = _check_content(rb, n, states[d]) or _check_last_version(rb)
        if problem is None:
            rb.add_episode(episode(before))
            problem = _check_content(rb, n + 1, states[d] + [before])
        return TrialResult(kind, problem is None, 0, done, problem)
    if kind in APPEND_KINDS:
        lost = max(0, committed - n)
        ok_range = committed <= n <= committed + (1 if kind == "add_episode" else MAX_EPISODES + 100)
    elif kind in SHRINK_KINDS:
        lost = max(0, (committed - 1) - n)
        ok_range = committed - 1 <= n <= committed
    else:
        lost = max(0, before - n)
        ok_range = n == before
    problem = None if ok_range else f"{n} episodes after the kill; {committed} committed"
    problem = problem or _check_content(rb, n)
    if problem is None:  # appending continues
        rb.add_episode(episode(n))
        problem = _check_content(rb, n + 1)
    return TrialResult(kind, problem is None, lost, done, problem)


if __name__ == "__main__":  # pragma: no cover
    _child(sys.argv[1], sys.argv[2])
