"""A read-only open of a store another process is editing right now says so — naming the process —
instead of calling the edit "interrupted" and advising a repair; once that process is gone, the same
journal is an interrupted edit, rolled back by the next writable open.  And ``update_meta``'s arrays
(the viewer's masks) are compressed like other meta, so ``replaybuf verify`` has nothing to note."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.errors import StoreLockedError
from replaybuf_core.inspection.verify import verify_store
from replaybuf_core.store.editing import EditInProgressError, InterruptedEditError

#: opens the store writable and starts deleting episode 0; once the edit's journal is written it
#: says so and sleeps in the middle of the rewrite
EDITOR = textwrap.dedent("""
    import sys, time
    from replaybuf_core import ReplayBuffer
    from replaybuf_core.store import editing
    rb = ReplayBuffer(sys.argv[1])
    real = rb.store.write
    def slow_write(group, name, start, values):
        if group == "data" and editing.pending(rb.store) is not None:
            print("editing", flush=True)
            time.sleep(60)
        return real(group, name, start, values)
    rb.store.write = slow_write
    rb.delete_episodes([0])
""")


def _build(path):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    for i, n in enumerate([4, 6, 3]):
        rb.add_episode({"x": np.arange(n, dtype=np.int64) + 100 * i})
    rb.close()


def test_a_running_edit_is_named_as_such_and_a_dead_one_as_interrupted(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    _build(path)
    proc = subprocess.Popen([sys.executable, "-c", EDITOR, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "editing"
        with pytest.raises(EditInProgressError, match=rf"being edited \(delete_episodes\) by process {proc.pid}, "
                                                      r"which holds its writer lock") as caught:
            ReplayBuffer.create_from_path(path)
        assert "interrupted" not in str(caught.value) and "repair" not in str(caught.value)
        assert isinstance(caught.value, StoreLockedError)
        assert main(["verify", str(path)]) == 2  # refused, not "FAILED": nothing is wrong with the store
        err = capsys.readouterr().err
        assert f"being edited (delete_episodes) by process {proc.pid}" in err
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the editor is gone: now the journal is an interrupted edit
    with pytest.raises(InterruptedEditError, match="interrupted delete_episodes .*no process holds its writer lock"):
        ReplayBuffer.create_from_path(path)
    # verify says that once — not also rows "missing" mid-move, nor that recovery refuses damage
    found = verify_store(path)
    assert [p.level for p in found] == ["error"] and "interrupted delete_episodes" in found[0].message
    assert "--repair" in found[0].message
    with pytest.warns(RuntimeWarning, match="rolled back"):
        rb = ReplayBuffer(str(path))
    rb.close()
    assert zarr.open_group(str(path), mode="r")["meta/episode_ends"][:].tolist() == [4, 10, 13]


def test_a_running_edit_in_this_process_is_named_too(tmp_path, monkeypatch):
    path = tmp_path / "s.zarr"
    _build(path)
    rb = ReplayBuffer(str(path))
    real, seen = rb.store.write, []

    def look(group, name, start, values):
        from replaybuf_core.store import editing

        if group == "data" and editing.pending(rb.store) is not None and not seen:
            with pytest.raises(EditInProgressError, match=r"by process \d+") as caught:
                ReplayBuffer.create_from_path(path)
            seen.append(str(caught.value))
        return real(group, name, start, values)

    monkeypatch.setattr(rb.store, "write", look)
    rb.delete_episodes([0])
    rb.close()
    assert len(seen) == 1


def test_update_meta_masks_are_compressed_and_verify_notes_nothing(tmp_path):
    path = tmp_path / "s.zarr"
    _build(path)
    with ReplayBuffer(str(path)) as rb:
        rb.update_meta({"mask.bad": np.array([False, True, False]), "fps": 10, "task": ["push", "t"]})
    meta = zarr.open_group(str(path), mode="r")["meta"]
    assert meta["mask.bad"][:].tolist() == [False, True, False]
    assert meta["mask.bad"].compressors  # zarr-python sees a compressor
    assert not [p for p in verify_store(path) if "mask.bad" in p.where]
