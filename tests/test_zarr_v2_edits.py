"""Edits of zarr v2 stores (diffusion_policy's format, opened writable in place): the versions before
an edit are not kept there (the backend has no versions group), so reading, diffing or restoring them
is refused by name — it read wrong rows silently, and ``restore`` failed on an internal assertion
(break-it trial); and a shrinking edit of an integer array whose v2 ``fill_value`` is null works."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.store.versions import VersionNotFoundError


def _v2_store(path, dtype="f4", fill_value=0.0):
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    g.create_array("data/x", shape=(9,), chunks=(4,), dtype=dtype, fill_value=fill_value)[:] = np.arange(9)
    g.create_array("meta/episode_ends", shape=(3,), chunks=(3,), dtype="i8", fill_value=0)[:] = [3, 6, 9]
    return path


def _raw(path):
    g = zarr.open_group(str(path), mode="r")
    return np.asarray(g["meta/episode_ends"][:]).tolist(), np.asarray(g["data/x"][:]).tolist(), \
        list(g["meta"].attrs.get("replaybuf_versions", []))


def test_a_version_before_an_edit_of_a_v2_store_is_refused_not_read_wrong(tmp_path, capsys):
    path = _v2_store(tmp_path / "v2.zarr")
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1])
    ends, x, log = _raw(path)
    assert ends == [3, 6] and x == [0, 1, 2, 6, 7, 8]  # the edit itself (model: episode 1 = rows 3..6 gone)
    assert [v["kind"] for v in log][-1] == "delete_episodes" and len(log) == 2  # logged, not kept
    with pytest.raises(VersionNotFoundError, match=r"version 0 cannot be read or restored.*delete_episodes"):
        ReplayBuffer(str(path), version=0)
    with ReplayBuffer(str(path), version=-1) as rb:  # the current version reads as ever
        assert list(rb.episode_ends) == [3, 6]
    assert main(["diff", str(path), "0", "1"]) != 0
    assert "cannot be read or restored" in capsys.readouterr().err
    with ReplayBuffer(str(path)) as rb, pytest.raises(VersionNotFoundError, match="cannot be read or restored"):
        rb.restore(0)
    assert _raw(path) == (ends, x, log)  # nothing changed, nothing recorded


def test_shrinking_a_v2_integer_array_whose_fill_value_is_null(tmp_path):
    path = _v2_store(tmp_path / "null.zarr", dtype="i4", fill_value=None)
    with ReplayBuffer(str(path)) as rb:
        rb.delete_episodes([1])
        rb.trim_episode(1, start=1, stop=3)
    ends, x, _ = _raw(path)
    assert ends == [3, 5] and x == [0, 1, 2, 7, 8]
