"""Readers of an older version on object storage hold it against ``gc`` (issue 50, "gc while a reader
holds a version: refused or deferred — never a reader's chunks deleted"): an expiring hold object,
renewed while the reader is open (``replaybuf_zarr/reader_holds.py``).  On moto's S3 server.

What the reader reads is compared with the episodes as they were written (the model), never with
the code's own view of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.store import versions

pytest.importorskip("obstore")


def _episodes(n: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.full((4 + i, 2), 10 * i, np.float32) + np.arange(4 + i, dtype=np.float32)[:, None]}
            for i in range(n)]


def _store(url: str, n: int = 4) -> list[dict[str, np.ndarray]]:
    eps = _episodes(n)
    with ReplayBuffer.create_empty("zarr", url) as rb:
        for ep in eps:
            rb.add_episode(ep)
    with ReplayBuffer(url) as rb:
        rb.delete_episodes([0])  # version 0: all four; version 1: without the first
    return eps


def _read_all(rb) -> list[np.ndarray]:
    x, ends = np.asarray(rb["x"][:]), list(rb.episode_ends)
    return [x[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _holds(url: str) -> list[str]:
    from replaybuf_zarr.object_store import _obstore, open_object_store

    store = open_object_store(url, read_only=True)
    return [m["path"] for batch in _obstore().list(store.store, prefix=".replaybuf.readers/") for m in batch]


def test_gc_defers_a_version_a_reader_holds_and_drops_it_once_the_reader_closed(s3_server, capsys):
    url = s3_server.new_url()
    eps = _store(url)
    reader = ReplayBuffer(url, version=0)  # a training run reading version 0
    assert len(_holds(url)) == 1
    with ReplayBuffer(url) as rb:
        rep = versions.gc(rb.store, keep=1)
    assert rep.dropped == [] and list(rep.held) == [0] and "pid" in rep.held[0][0]
    for got, want in zip(_read_all(reader), eps):  # every chunk of version 0 is still there
        np.testing.assert_array_equal(got, want["x"])
    reader.close()
    assert _holds(url) == []
    assert main(["gc", url, "--keep", "1"]) == 0
    assert "dropped 1 version(s) (0..0)" in capsys.readouterr().out
    with ReplayBuffer(url, read_only=True) as rb:
        assert [int(v["id"]) for v in versions.log(rb.store)] == [1]


def test_a_hold_is_renewed_while_its_reader_is_open(s3_server, monkeypatch):
    monkeypatch.setenv("REPLAYBUF_LEASE_SECONDS", "1.5")
    url = s3_server.new_url()
    _store(url)
    with ReplayBuffer(url, version=0):
        time.sleep(4)  # well past the first expiry: renewed every half second
        with ReplayBuffer(url) as rb:
            rep = versions.gc(rb.store, keep=1)
        assert rep.dropped == [] and list(rep.held) == [0]
    with ReplayBuffer(url) as rb:
        assert versions.gc(rb.store, keep=1).dropped == [0]


@pytest.mark.slow  # waits for a killed reader's hold to lapse
def test_a_killed_readers_hold_lapses_by_itself(s3_server):
    url = s3_server.new_url()
    _store(url)
    code = textwrap.dedent(f"""
        import os, signal
        from replaybuf_core import ReplayBuffer
        rb = ReplayBuffer({url!r}, version=0)
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "REPLAYBUF_LEASE_SECONDS": "3"}
    p = subprocess.run([sys.executable, "-c", code], timeout=120, env=env, capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL and "holding" in p.stdout
    assert len(_holds(url)) == 1
    with ReplayBuffer(url) as rb:
        assert versions.gc(rb.store, keep=1).dropped == []  # not lapsed yet: its reader may be alive
    time.sleep(3.5)
    with ReplayBuffer(url) as rb:
        rep = versions.gc(rb.store, keep=1)
    assert rep.dropped == [0] and not rep.held
    assert _holds(url) == []  # the lapsed hold is gone too


def test_a_reader_that_cannot_write_its_hold_reads_on_and_says_so(s3_server, monkeypatch, caplog):
    from replaybuf_zarr import reader_holds

    url = s3_server.new_url()
    eps = _store(url)

    def refused(*args, **kwargs):
        raise PermissionError("AccessDenied: read-only credentials")

    monkeypatch.setattr(reader_holds, "hold_version", refused)
    with ReplayBuffer(url, version=0) as rb:
        for got, want in zip(_read_all(rb), eps):
            np.testing.assert_array_equal(got, want["x"])
    assert any("without a hold" in r.getMessage() for r in caplog.records)


def test_a_reader_with_a_bad_lease_setting_is_refused_naming_it(s3_server, monkeypatch, caplog):
    """A bad ``REPLAYBUF_LEASE_SECONDS`` is the user's to fix: an error naming it, not a warning and a
    read without a hold (which ``gc`` elsewhere cannot see)."""
    url = s3_server.new_url()
    _store(url)
    monkeypatch.setenv("REPLAYBUF_LEASE_SECONDS", "-5")
    with pytest.raises(ValueError, match="REPLAYBUF_LEASE_SECONDS='-5'"):
        ReplayBuffer(url, version=0)
    assert not any("without a hold" in r.getMessage() for r in caplog.records)
    assert _holds(url) == []


@pytest.mark.parametrize("where", ["s3", "disk"])
def test_a_forked_child_closing_the_reader_it_inherited_leaves_the_parents_hold(s3_server, tmp_path, where):
    """A DataLoader worker forked from a process reading a version may drop (close) the buffer it
    inherited: the hold is the parent's, and must stay while the parent reads."""
    url = s3_server.new_url() if where == "s3" else str(tmp_path / "s.zarr")
    _store(url)
    reader = ReplayBuffer(url, version=0)
    pid = os.fork()
    if pid == 0:  # the child: close what it inherited, then leave without running any more cleanup
        try:
            reader.close()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    with ReplayBuffer(url) as rb:
        rep = versions.gc(rb.store, keep=1, store_dir=None if where == "s3" else url)
    assert rep.dropped == [] and list(rep.held) == [0]
    reader.close()


def _gc(url: str, where: str, keep: int = 1) -> versions.GcReport:
    with ReplayBuffer(url) as rb:
        return versions.gc(rb.store, keep=keep, store_dir=None if where == "s3" else url)


@pytest.mark.parametrize("where", ["s3", "disk"])
def test_a_reader_dropped_without_close_releases_its_hold(s3_server, tmp_path, where):
    """A buffer opened at a version and dropped without ``close`` (a torch dataset deleted, a script's
    variable rebound) lets its hold go, as a dropped writer lets its lock go: before, the renewing
    thread (s3) or the open lock file (disk) held the version until the process ended."""
    import gc as pygc
    import threading

    url = s3_server.new_url() if where == "s3" else str(tmp_path / "s.zarr")
    _store(url)
    reader = ReplayBuffer(url, version=0)
    assert list(_gc(url, where).held) == [0]
    del reader
    pygc.collect()
    rep = _gc(url, where)
    assert rep.dropped == [0] and not rep.held
    assert not [t for t in threading.enumerate() if t.name.startswith("replaybuf-hold")]
    if where == "s3":
        assert _holds(url) == []


@pytest.mark.parametrize("where", ["s3", "disk"])
def test_a_version_dropped_before_its_reader_resolved_it_is_not_swapped_for_another(s3_server, tmp_path,
                                                                                  monkeypatch, where):
    """gc drops version 0 after the reader looked it up and before it took its hold: the reader must
    find version 0 gone (VersionNotFoundError), not hold and read version 1 in its place (the log's
    index was read again from the shortened log)."""
    url = s3_server.new_url() if where == "s3" else str(tmp_path / "s.zarr")
    _store(url)
    real_find, calls = versions.find, []

    def find_then_gc(store, version, *args):
        out = real_find(store, version, *args)
        calls.append(version)
        if len(calls) == 1:  # the reader's first look: gc runs now, before its hold
            assert _gc(url, where).dropped == [0]
        return out

    monkeypatch.setattr(versions, "find", find_then_gc)
    with pytest.raises(versions.VersionNotFoundError):
        ReplayBuffer(url, version=0).close()


@pytest.mark.parametrize("again", [False, True], ids=["once", "gc-again"])
@pytest.mark.parametrize("where", ["s3", "disk"])
def test_a_reader_whose_hold_gc_saw_only_at_its_second_look_reads_its_version(s3_server, tmp_path,
                                                                              monkeypatch, where, again):
    """gc looks at the holds (none), the reader takes its hold and finds its version still in the log,
    gc writes the shortened log, looks again and keeps the reader's undos: the reader reads version 0
    (as written), not whatever the shortened log has at its index (before: version 1, silently).
    ``again``: a second gc while the reader is open keeps those undos too (before: it deleted them as
    arrays no version names, and the reader failed with a KeyError)."""
    import threading

    from replaybuf_core.store import version_readers

    url = s3_server.new_url() if where == "s3" else str(tmp_path / "s.zarr")
    eps = _store(url)
    looked, found, cut = threading.Event(), threading.Event(), threading.Event()
    real_held, real_find = version_readers.held_store, versions.find
    gc_looks, reader_finds, out = [], [], {}

    def held_store(store, store_dir):  # gc's looks at the holds, on the gc thread
        res = real_held(store, store_dir)
        gc_looks.append(dict(res))
        if len(gc_looks) == 1:
            looked.set()
            assert found.wait(60)
        else:
            cut.set()
        return res

    def find(store, version, *args):  # the reader's looks at the log
        res = real_find(store, version, *args)
        reader_finds.append(version)
        if len(reader_finds) == 2:  # with its hold taken, its version still in the log
            found.set()
            assert cut.wait(60)
        return res

    def run_gc():
        out["rep"] = _gc(url, where)

    monkeypatch.setattr(version_readers, "held_store", held_store)
    t = threading.Thread(target=run_gc, daemon=True)
    t.start()
    assert looked.wait(60)
    monkeypatch.setattr(versions, "find", find)
    with ReplayBuffer(url, version=0) as reader:
        t.join(60)
        assert not t.is_alive() and out["rep"].dropped == [0] and gc_looks[0] == {} and 0 in gc_looks[1]
        if again:
            monkeypatch.setattr(version_readers, "held_store", real_held)
            assert _gc(url, where).dropped == []
        got = _read_all(reader)
        assert len(got) == len(eps)
        for g, want in zip(got, eps):
            np.testing.assert_array_equal(g, want["x"])


def _skewed_reader(url: str, skew: float, lease: str = "60") -> subprocess.Popen:
    """A process reading version 0 of ``url`` whose clock is ``skew`` seconds off (a robot's computer
    without a real-time clock, a VM resumed with a stale one); it says "holding", then reads on a
    line on stdin and prints the episodes' lengths."""
    code = textwrap.dedent(f"""
        import sys, time, types
        import numpy as np
        from replaybuf_zarr import reader_holds
        reader_holds.time = types.SimpleNamespace(time=lambda: time.time() + {skew!r})
        from replaybuf_core import ReplayBuffer
        with ReplayBuffer({url!r}, version=0) as rb:
            print("holding", flush=True)
            sys.stdin.readline()
            print("lengths", list(np.diff([0] + list(rb.episode_ends))), flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "REPLAYBUF_LEASE_SECONDS": lease})
    assert p.stdout.readline().strip() == "holding"
    return p


def test_a_reader_whose_clock_is_behind_still_holds_its_version(s3_server):
    """A hold's expiry was the reader's clock plus the lease: a live reader whose clock is an hour
    behind wrote holds already lapsed for gc, which deleted them and dropped the version it read."""
    url = s3_server.new_url()
    eps = _store(url)
    p = _skewed_reader(url, -3600.0)
    try:
        with ReplayBuffer(url) as rb:
            rep = versions.gc(rb.store, keep=1)
        assert rep.dropped == [] and list(rep.held) == [0]
        out, _ = p.communicate("\n", timeout=60)
        assert f"lengths {[len(e['x']) for e in eps]}" in out.replace("np.int64(", "").replace(")", "")
    finally:
        p.kill()


def test_a_killed_reader_whose_clock_is_ahead_does_not_hold_its_version_for_ever(s3_server, monkeypatch):
    """A reader whose clock is a day ahead, killed: its hold lapses a lease after its last renewal
    (the server's time), not a day later."""
    monkeypatch.setenv("REPLAYBUF_LEASE_SECONDS", "1.5")
    url = s3_server.new_url()
    _store(url)
    p = _skewed_reader(url, 86400.0, lease="1.5")
    p.kill()
    p.wait(60)
    with ReplayBuffer(url) as rb:
        assert list(versions.gc(rb.store, keep=1).held) == [0]  # (not lapsed yet: it may be alive)
    time.sleep(3.0)  # a lease, and the second the server's times are rounded to
    with ReplayBuffer(url) as rb:
        rep = versions.gc(rb.store, keep=1)
    assert rep.dropped == [0] and not rep.held and _holds(url) == []
