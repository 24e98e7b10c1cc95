"""Ctrl-C at any instant (issue 47, item 6): the long commands, run as a user runs them (a subprocess of
the real CLI) and sent SIGINT as a terminal sends it (to the whole process group, a local Dask cluster's
workers included) at random instants, exit 130 with one line — or 0 when they had finished — and the
same command run again leaves the destination right and nothing beside it or inside it.

The instants are drawn once the CLI's ``main`` runs (its SIGTERM handler is installed: seen in
``/proc/PID/status``), uniformly over the time a clean run of the same command takes; what comes
before ``main`` is Python's own start and the import of ``replaybuf_core.cli``, which must stay light
(:func:`test_starting_the_cli_loads_no_heavy_module`).  A few instants per command here; the slow
variant draws more.

The mechanisms behind it have deterministic tests below: a backend write interrupted by Ctrl-C has
finished when the interrupt is raised (zarr's IO thread and the codec pool went on writing after it,
under whatever cleaned up: ``rechunk`` left ``data/_temp.<key>``, ``export`` its build); the swap of a
build beside is not cut between its two renames; a merge builds once beside its destination (it saved
its first source beside its own build: ``..m.zarr.building-...building-...``); what a process that is
gone left beside a destination is removed by the next build there, never a store in place.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import textwrap
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer, export_dataset
from replaybuf_core.cli import main

linux = pytest.mark.skipif(not Path("/proc/self/status").exists() or not hasattr(os, "killpg"),
                           reason="reads /proc/PID/status and signals process groups (Linux)")

N_EPISODES, T = 20, 100
FEW, MANY = 2, 8  # instants per command: here, and in the slow variant


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A store of 20 episodes (random uint8 frames 48x48x3, float32 action and state: a copy takes a
    couple of seconds) and its arrays, plus the same episodes as a diffusion-policy zarr (to import)."""
    root = tmp_path_factory.mktemp("source")
    rng = np.random.default_rng(47)
    arrays = {"img": rng.integers(0, 256, (N_EPISODES * T, 48, 48, 3), dtype=np.uint8),
              "action": rng.standard_normal((N_EPISODES * T, 7)).astype(np.float32),
              "state": rng.standard_normal((N_EPISODES * T, 12)).astype(np.float32)}
    with ReplayBuffer.create_empty("zarr", str(root / "src.zarr")) as rb:
        for e in range(N_EPISODES):
            rb.add_episode({k: v[e * T:(e + 1) * T] for k, v in arrays.items()})
    export_dataset(root / "src.zarr", root / "dp.zarr", "diffusion-policy", progress=False)
    ends = np.arange(1, N_EPISODES + 1) * T
    return root, arrays, ends


# ------------------------------------------------------------------ the commands
def _equal_store(path, arrays, ends, chunks=None):
    with ReplayBuffer.create_from_path(path) as rb:
        assert sorted(rb.keys()) == sorted(arrays)
        assert np.array_equal(rb.episode_ends[:], ends)
        for k, v in arrays.items():
            assert np.array_equal(rb[k][:], v), k
        if chunks is not None:
            assert {k: c[0] for k, c in rb.get_chunks().items()} == chunks


def _copy(src, tmp):
    def check(arrays, ends):
        _equal_store(tmp / "c.zarr", arrays, ends)
    return ["copy", str(src / "src.zarr"), str(tmp / "c.zarr"), "--no-progress"], ["--overwrite"], {"c.zarr"}, check


def _merge(src, tmp):
    def check(arrays, ends):
        _equal_store(tmp / "m.zarr", {k: np.concatenate([v, v]) for k, v in arrays.items()},
                     np.concatenate([ends, ends + ends[-1]]))
    return (["merge", str(src / "src.zarr"), str(src / "src.zarr"), str(tmp / "m.zarr"), "--no-progress"], ["--overwrite"],
            {"m.zarr"}, check)


def _rechunk(src, tmp):
    shutil.copytree(src / "src.zarr", tmp / "w.zarr")

    def check(arrays, ends):
        _equal_store(tmp / "w.zarr", arrays, ends, chunks={"action": 40, "state": 40, "img": 25})
    return (["rechunk", str(tmp / "w.zarr"), "--chunk-length", "*=40", "--chunk-length", "img=25", "--compressor",
             "*=disk"], [], {"w.zarr"}, check)


def _export(src, tmp):
    def check(arrays, ends):
        g = zarr.open_group(str(tmp / "e.zarr"), mode="r")  # zarr v2, read as diffusion_policy reads it
        assert np.array_equal(g["meta/episode_ends"][:], ends)
        assert sorted(g["data"].array_keys()) == sorted(arrays)
        for k, v in arrays.items():
            assert np.array_equal(g["data"][k][:], v), k
    return ["export", "diffusion-policy", str(src / "src.zarr"), str(tmp / "e.zarr"), "--no-progress"], \
        ["--overwrite"], {"e.zarr"}, check


def _import(src, tmp):
    def check(arrays, ends):
        _equal_store(tmp / "i.zarr", arrays, ends)  # frames in the default lossless codec
    return (["import", "diffusion-policy", str(src / "dp.zarr"), str(tmp / "i.zarr"), "--workers", "2",
             "--no-progress"], ["--overwrite"], {"i.zarr"}, check)


COMMANDS = {"copy": _copy, "merge": _merge, "rechunk": _rechunk, "export": _export, "import": _import}


# ------------------------------------------------------------------ running and interrupting
def _main_started(pid: int) -> bool:
    """The CLI's ``main`` runs: the process is ours (exec'd) and catches SIGTERM (main's first act)."""
    try:
        if b"replaybuf_core.cli" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False
        caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def _run(argv, interrupt_after: float | None = None):
    """Run ``replaybuf ARGV`` in a new process group; with ``interrupt_after``, SIGINT the group that
    many seconds after ``main`` started.  Returns (rc, stdout, stderr, seconds from main's start)."""
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"})  # SIGABRT: every thread's stack
    try:
        deadline = time.monotonic() + 120
        while not _main_started(proc.pid) and proc.poll() is None:
            assert time.monotonic() < deadline, "the CLI's main did not start within 120 s"
            time.sleep(0.002)
        started = time.monotonic()
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            try:
                os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
            except ProcessLookupError:
                pass
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # a hang: its threads' stacks say where
            os.killpg(proc.pid, signal.SIGABRT)
            out, err = proc.communicate(timeout=60)
            raise AssertionError(f"replaybuf {' '.join(argv)} did not end within 300 s; its stderr (with every "
                                 f"thread's stack):\n{err[-6000:]}") from None
        seconds = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _wait_for_the_group_to_end(proc.pid)
    return proc.returncode, out, err, seconds


def _wait_for_the_group_to_end(pgid: int, timeout: float = 60) -> None:
    """Nothing the command started (a cluster's workers) outlives it, beyond a bounded wait."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:  # a zombie of the group not reaped yet
            pass
        assert time.monotonic() < deadline, f"processes of the command's group {pgid} still run {timeout} s after it"
        time.sleep(0.1)


def _leftovers(tmp: Path, expected: set[str]) -> list[str]:
    """What is beside the destination(s) and not expected, and what inside them is debris: rechunk
    temporaries (``_temp*``), the chunk writer's ``.tmp-*``, zarr's ``*.partial``."""
    found = sorted(set(os.listdir(tmp)) - expected)
    for name in expected & set(os.listdir(tmp)):
        for d, dirs, files in os.walk(tmp / name):
            found += [os.path.join(d, f) for f in dirs + files
                      if f.startswith(("_temp", ".tmp-")) or f.endswith(".partial")]
    return found


def _trials(command: str, source, tmp_path, n: int) -> None:
    src, arrays, ends = source
    make = COMMANDS[command]
    clean = tmp_path / "clean"
    clean.mkdir()
    argv, rerun_extra, expected, check = make(src, clean)
    rc, out, err, seconds = _run(argv)
    assert rc == 0, err
    check(arrays, ends)
    for i, instant in enumerate(random.uniform(0, seconds) for _ in range(n)):
        tmp = tmp_path / f"trial{i}"
        tmp.mkdir()
        argv, rerun_extra, expected, check = make(src, tmp)
        rc, out, err, _ = _run(argv, interrupt_after=instant)
        said = f"{command} interrupted {instant:.2f} s after main started (a clean run takes {seconds:.2f} s)"
        assert rc in (0, 130), f"{said}: exit {rc}, stderr:\n{err}"
        assert "Traceback" not in err and len(err.splitlines()) <= 1, f"{said}: stderr:\n{err}"
        if rc == 130:
            assert err.splitlines() in ([f"replaybuf {command}: interrupted"], ["replaybuf: interrupted"]), said
        rc, out, err, _ = _run(argv + rerun_extra)
        assert rc == 0, f"{said}; the rerun: exit {rc}, stderr:\n{err}"
        assert _leftovers(tmp, expected) == [], said
        check(arrays, ends)


@linux
@pytest.mark.parametrize("command", ["copy", "merge", "rechunk", "export"])
def test_ctrl_c_at_a_few_instants_exits_130_in_one_line_and_a_rerun_cleans_up(command, source, tmp_path):
    _trials(command, source, tmp_path, FEW)


@linux
@pytest.mark.parametrize("command", ["copy", "merge", "rechunk", "export", "import"])
def test_ctrl_c_at_many_instants(command, source, tmp_path):
    if command == "import":
        pytest.importorskip("distributed")
    _trials(command, source, tmp_path, MANY)


@linux
def test_ctrl_c_of_an_import_on_local_workers(source, tmp_path):
    """``import --workers 2``: a Ctrl-C reaching the workers while they start (before their preload
    ignores it) printed their tracebacks, "Nanny failed to start" and exit -2."""
    pytest.importorskip("distributed")
    _trials("import", source, tmp_path, FEW)


def test_starting_the_cli_loads_no_heavy_module():
    """What runs before ``main`` cannot turn a Ctrl-C into one line: importing ``replaybuf_core.cli``
    (and so ``replaybuf_core``) loads no NumPy, zarr, numba or Dask — those load inside ``main``."""
    code = ("import sys, replaybuf_core.cli\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'zarr', 'numba', 'distributed', "
            "'dask', 'pluggy', 'numcodecs'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ the mechanisms
@pytest.fixture
def ctrl_c_raises():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test runner set
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_write_interrupted_by_ctrl_c_has_finished_when_the_interrupt_is_raised(tmp_path, ctrl_c_raises):
    """A Ctrl-C during ``write``: the rows are all stored when the KeyboardInterrupt is raised, and
    nothing lands after it (zarr-python's IO thread and the codec pool went on writing)."""
    values = np.random.default_rng(0).standard_normal((512, 128, 128)).astype(np.float32)  # 32 MB
    inside = {"ours": 0, "zarr": 0}  # writes of whole chunks go through our chunk writer; others, zarr-python
    for attempt in range(12):
        path = tmp_path / f"w{attempt}.zarr"
        with ReplayBuffer.create_empty("zarr", str(path)) as rb:
            store = rb.store
            for key, start in (("ours", 0), ("zarr", 8)):
                if inside[key]:
                    continue
                store.create_array("data", key, shape=values.shape, dtype=values.dtype, chunks=(16, 128, 128))
                timer = threading.Timer(random.uniform(0.0, 0.05), os.kill, (os.getpid(), signal.SIGINT))
                timer.start()
                # The one SIGINT is raised exactly once, and always inside the outer ``try``: in the
                # write, or (sent after it) in the join/sleep that follows.  No ``finally`` joins the
                # timer: an interrupt raised there would leave the test and stop the pytest worker.
                try:
                    try:
                        store.write("data", key, start, values[start:])
                    except KeyboardInterrupt:
                        inside[key] += 1
                    else:  # the Ctrl-C came after the write: wait for it
                        timer.join()
                        time.sleep(1)
                except KeyboardInterrupt:
                    timer.join()  # already fired: no second interrupt can come
                    continue
                except BaseException:
                    timer.cancel()
                    raise
                timer.join()
                files = sorted(p.name for p in (path / "data" / key).rglob("*"))
                time.sleep(0.3)  # room for a write left running to land
                assert sorted(p.name for p in (path / "data" / key).rglob("*")) == files, key
                assert np.array_equal(store.read("data", key, start, len(values)), values[start:]), key
        if all(inside.values()):
            return
    pytest.fail(f"no Ctrl-C arrived while a write ran in 12 attempts: {inside}")


def test_ctrl_c_as_zarr_starts_its_io_thread_leaves_no_exit_traceback(tmp_path):
    """A Ctrl-C between zarr making its IO loop's thread and starting it (zarr starts it on first use)
    left a thread its exit hook cannot join: "Exception ignored in atexit callback ... cannot join
    thread before it is started".  The zarr backend starts the loop whole, Ctrl-C held back."""
    with ReplayBuffer.create_empty("zarr", str(tmp_path / "s.zarr")) as rb:
        rb.add_episode({"x": np.arange(3, dtype=np.float32)})
    code = ("import os, signal, sys, threading\n"
            "start = threading.Thread.start\n"
            "def ctrl_c_first(self):\n"
            "    if self.name == 'zarr_io':\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "    return start(self)\n"
            "threading.Thread.start = ctrl_c_first\n"
            "from replaybuf_core import ReplayBuffer\n"
            "try:\n"
            f"    ReplayBuffer.create_from_path({str(tmp_path / 's.zarr')!r})\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "interrupted" and run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_ctrl_c_during_the_swap_of_a_build_beside_leaves_the_new_store(tmp_path, monkeypatch, ctrl_c_raises):
    """A Ctrl-C between the two renames of the swap: the build was removed and the old store left
    under a hidden name, no store at the path.  Now the swap completes, then the interrupt is raised."""
    from replaybuf_core.store import replace

    old = tmp_path / "s.zarr"
    with ReplayBuffer.create_empty("zarr", str(old)) as rb:
        rb.add_episode({"x": np.zeros(3, dtype=np.float32)})
    new = ReplayBuffer.create_empty_numpy()
    new.add_episode({"x": np.ones(5, dtype=np.float32)})
    real_rename = os.rename

    def rename_then_ctrl_c(a, b):
        real_rename(a, b)
        if Path(a).name == "s.zarr":  # the old store moved aside: the first rename of the swap
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(replace.os, "rename", rename_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        new.save_to_path(old)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["s.zarr"]
    with ReplayBuffer.create_from_path(old) as rb:
        assert np.array_equal(rb["x"][:], np.ones(5))


def test_a_merge_builds_once_beside_its_destination(tmp_path, monkeypatch):
    """Its first source was saved with a build beside its own build (``..m.zarr.building-*.building-*``)."""
    from replaybuf_core.store import buffer_copying, merging

    with ReplayBuffer.create_empty("zarr", str(tmp_path / "a.zarr")) as rb:
        rb.add_episode({"x": np.arange(4, dtype=np.float32)})
    builds = []
    for module in (merging, buffer_copying):
        real = module.build_beside

        def spy(path, *args, _real=real, **kwargs):
            builds.append(Path(path).name)
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(module, "build_beside", spy)
    assert main(["merge", str(tmp_path / "a.zarr"), str(tmp_path / "a.zarr"), str(tmp_path / "m.zarr")]) == 0
    assert builds == ["m.zarr"]
    with ReplayBuffer.create_from_path(tmp_path / "m.zarr") as rb:
        assert np.array_equal(rb["x"][:], np.r_[np.arange(4), np.arange(4)])


def test_the_next_build_removes_what_a_gone_process_left_and_never_a_store(tmp_path):
    """Beside an existing store: a dead process's build, a build nested in it and the old store it had
    moved aside after its swap are removed by the next copy there; a live process's build stays, and
    an old store moved aside while no store is in place (a swap cut by a power cut) is never deleted."""
    dead = _dead_pid()
    src = tmp_path / "src.zarr"
    with ReplayBuffer.create_empty("zarr", str(src)) as rb:
        rb.add_episode({"x": np.arange(4, dtype=np.float32)})
    dst = tmp_path / "d.zarr"
    assert main(["copy", str(src), str(dst)]) == 0
    gone = [f".d.zarr.building-{dead}-0badc0de", f"..d.zarr.building-{dead}-0badc0de.building-{dead}-1badc0de",
            f".d.zarr.replaced-{dead}-2badc0de"]
    live = f".d.zarr.building-{os.getppid()}-3badc0de"
    for name in gone + [live]:
        shutil.copytree(src, tmp_path / name)
    kept = f".e.zarr.replaced-{dead}-4badc0de"  # e.zarr itself missing: its only copy may be this one
    shutil.copytree(src, tmp_path / kept)
    assert main(["copy", str(src), str(dst), "--overwrite"]) == 0
    assert main(["copy", str(src), str(tmp_path / "e.zarr")]) == 0
    assert sorted(os.listdir(tmp_path)) == sorted([kept, live, "d.zarr", "e.zarr", "src.zarr"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_an_interrupt_python_cannot_raise_is_raised_again_not_printed_and_lost():
    """A Ctrl-C inside a callback Python calls where it cannot raise (importlib's module-lock
    callback: "Exception ignored in ... KeyboardInterrupt" with a traceback, the interrupt lost; a
    CI run's SIGINT trial of `merge` caught it once) ends the command with one line and 130."""
    code = textwrap.dedent("""
        import sys, weakref
        from replaybuf_core import cli

        class Lost:
            pass

        def callback(_):
            raise KeyboardInterrupt  # raised where Python can only report it

        def command(args):
            obj = Lost()
            ref = weakref.ref(obj, callback)
            del obj  # the callback runs here: its exception is unraisable
            for _ in range(10**7):  # the re-raised interrupt arrives at one of these bytecodes
                pass
            return 0

        def build():
            import argparse
            p = argparse.ArgumentParser(prog="replaybuf")
            p.add_argument("--verbose", action="store_true")
            p.set_defaults(func=command, command="lost")
            return p

        cli.build_parser = build
        sys.exit(cli.main([]))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 130, (run.returncode, run.stderr)
    assert run.stderr.strip() == "replaybuf lost: interrupted", run.stderr


def test_an_interrupted_command_exits_even_when_a_pool_thread_is_stuck(tmp_path):
    """The exit after an interrupt joins the codec pool's threads; one stuck for good (here: waiting on
    an event nobody sets, as a helper waits on a lock the interrupted main thread kept) kept a
    ``replaybuf merge`` that had said "interrupted" alive for ever (a CI run's 300 s time-out).  The
    exit is bounded (``REPLAYBUF_EXIT_BOUND_SECONDS``): 130 and the one line, as ever."""
    with ReplayBuffer.create_empty("zarr", str(tmp_path / "s.zarr")) as rb:
        rb.add_episode({"x": np.arange(3, dtype=np.float32)})
    code = textwrap.dedent(f"""
        import sys, threading
        import replaybuf_core.cli.info_cmd as info
        from replaybuf_zarr.pool import codec_pool

        def stuck_then_ctrl_c(args):
            codec_pool().submit(threading.Event().wait)  # never set: the pool thread never ends
            raise KeyboardInterrupt

        info.run = stuck_then_ctrl_c
        sys.argv = ["replaybuf", "info", {str(tmp_path / "s.zarr")!r}]
        from replaybuf_core.cli import main
        sys.exit(main())
    """)
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "REPLAYBUF_EXIT_BOUND_SECONDS": "2"})
    assert (run.returncode, run.stderr) == (130, "replaybuf info: interrupted\n"), run.stderr
    assert time.monotonic() - started < 60
