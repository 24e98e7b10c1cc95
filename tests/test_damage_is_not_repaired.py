"""A damaged ``meta/episode_ends`` is reported, never "repaired" into an empty store (break-it trial,
issue 13.1): recovery undoes only what an interrupted write can leave."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.store.commit import COMMIT_RECORD, read_commit_record
from replaybuf_core.testing import make_episode, tree_digest

LENGTHS = (5, 6, 7, 4)


_digest = tree_digest


def _store(tmp_path: Path, uncompressed_ends: bool) -> Path:
    path = tmp_path / "b.zarr"
    rb = ReplayBuffer.create_empty_zarr()
    for i, n in enumerate(LENGTHS):
        rb.add_episode(make_episode(n, i))
    rb.save_to_path(path)
    if uncompressed_ends:  # so zeroed bytes read as zeros (what the break-it trial saw)
        g = zarr.open_group(str(path), mode="r+")
        ends = g["meta/episode_ends"][:]
        del g["meta/episode_ends"]
        g["meta"].create_array("episode_ends", data=ends, chunks=(1000,), compressors=None, fill_value=-1)
    return path


def _ends_chunk(path: Path) -> Path:
    return path / "meta" / "episode_ends" / "c" / "0"


def _damage(path: Path, how: str) -> None:
    chunk = _ends_chunk(path)
    if how == "zeroed":
        chunk.write_bytes(b"\0" * chunk.stat().st_size)
    else:
        chunk.unlink()


def _must_refuse(path: Path, capsys) -> None:
    before = _digest(path)
    with pytest.raises(CorruptStoreError, match="episode_ends"):
        ReplayBuffer(str(path))  # writable open
    assert main(["verify", "--repair", str(path)]) != 0
    assert main(["verify", str(path)]) != 0
    out = capsys.readouterr()
    assert "episode_ends" in out.out + out.err
    assert _digest(path) == before, "nothing may change"
    g = zarr.open_group(str(path), mode="r")
    assert g["data/obs"].shape[0] == sum(LENGTHS), "committed data kept"


@pytest.mark.parametrize("how", ["zeroed", "deleted"])
@pytest.mark.parametrize("uncompressed", [True, False])
def test_damaged_commit_chunk_with_record(tmp_path, capsys, how, uncompressed):
    path = _store(tmp_path, uncompressed)
    assert read_commit_record(ReplayBuffer.create_from_path(str(path)).store) == (len(LENGTHS), sum(LENGTHS))
    _damage(path, how)
    _must_refuse(path, capsys)


@pytest.mark.parametrize("how", ["zeroed", "deleted"])
def test_damaged_commit_chunk_without_record(tmp_path, capsys, how):
    """A store of another writer (no commit record): all-fill or all-zero ends beside data is damage."""
    path = _store(tmp_path, uncompressed_ends=True)
    g = zarr.open_group(str(path), mode="r+")
    attrs = dict(g["meta"].attrs)
    attrs.pop(COMMIT_RECORD)
    g["meta"].attrs.clear()
    g["meta"].attrs.update(attrs)
    _damage(path, how)
    _must_refuse(path, capsys)


def test_interrupted_commit_and_append_are_still_undone(tmp_path):
    """The two states a killed writer leaves keep being repaired with the record in place."""
    path = _store(tmp_path, uncompressed_ends=False)
    g = zarr.open_group(str(path), mode="r+")
    n = sum(LENGTHS)
    g["data/obs"].resize((n + 3,) + g["data/obs"].shape[1:])  # rows of an episode never committed
    g["data/action"].resize((n + 3,) + g["data/action"].shape[1:])
    g["meta/episode_ends"].resize((len(LENGTHS) + 2,))  # a commit whose values never arrived
    with pytest.warns(RuntimeWarning, match="interrupted commit.*interrupted append"):
        rb = ReplayBuffer(str(path))
    assert rb.n_episodes == len(LENGTHS) and rb.n_steps == n
    rb.close()


def test_zero_length_episodes_of_other_writers_open_read_only(tmp_path):
    """3D-Diffusion-Policy stores hold empty episodes: they open, nothing to trim, nothing trimmed."""
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    g.create_array("data/x", data=np.arange(10, dtype="f4"))
    g.create_array("meta/episode_ends", data=np.array([4, 4, 10], dtype="i8"))
    rb = ReplayBuffer.create_from_path(str(tmp_path / "s.zarr"))
    assert rb.n_episodes == 3 and rb.n_steps == 10
