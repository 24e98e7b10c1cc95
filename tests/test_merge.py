"""``ReplayBuffer.merge`` / ``replaybuf merge``: episodes of every source in order, read back through
zarr-python; per-episode meta arrays concatenated when every source has them; mismatches named."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main


def _store(path, lengths, base, meta=True, dtype=np.float32):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    for i, n in enumerate(lengths):
        rb.add_episode({"x": (np.arange(n) + base + 100 * i).astype(dtype), "img": np.full((n, 3, 3, 3), base + i, np.uint8)})
    if meta:
        rb.update_meta({"tag": np.arange(len(lengths), dtype=np.int64) + base})
    rb.update_meta({"only_here": np.zeros(len(lengths), dtype=np.int8)} if base == 0 else {})
    rb.close()
    return str(path)


def test_merge_writes_every_episode_in_order(tmp_path):
    a = _store(tmp_path / "a.zarr", [3, 2], 0)
    b = _store(tmp_path / "b.zarr", [4], 50)
    out = ReplayBuffer.merge([a, b], tmp_path / "m.zarr")
    assert out.n_episodes == 3
    g = zarr.open_group(str(tmp_path / "m.zarr"), mode="r")
    assert g["meta/episode_ends"][:].tolist() == [3, 5, 9]
    assert g["data/x"][:].tolist() == [0, 1, 2, 100, 101, 50, 51, 52, 53]
    assert g["data/img"][:, 0, 0, 0].tolist() == [0, 0, 0, 1, 1, 50, 50, 50, 50]
    assert g["meta/tag"][:].tolist() == [0, 1, 50]
    assert "only_here" not in g["meta"]  # not in every source: not per-episode any more
    with pytest.raises(FileExistsError, match="overwrite"):
        ReplayBuffer.merge([a, b], tmp_path / "m.zarr")
    ReplayBuffer.merge([b, a], tmp_path / "m.zarr", overwrite=True)
    assert zarr.open_group(str(tmp_path / "m.zarr"), mode="r")["data/x"][:].tolist()[:4] == [50, 51, 52, 53]


def test_mismatches_are_named(tmp_path):
    a = _store(tmp_path / "a.zarr", [3], 0)
    f64 = _store(tmp_path / "f.zarr", [2], 10, dtype=np.float64)
    with pytest.raises(ValueError, match=r"source 1 \(.*f.zarr\): key 'x' is float64 \(\) per step, source 0 has float32"):
        ReplayBuffer.merge([a, f64], tmp_path / "m.zarr")
    other = ReplayBuffer.create_empty("zarr", str(tmp_path / "o.zarr"))
    other.add_episode({"y": np.zeros(2)})
    other.close()
    with pytest.raises(ValueError, match=r"missing \['img', 'x'\], extra \['y'\]"):
        ReplayBuffer.merge([a, str(tmp_path / "o.zarr")], tmp_path / "m.zarr")
    with pytest.raises(ValueError, match="is the destination"):
        ReplayBuffer.merge([a], a)
    assert not (tmp_path / "m.zarr").exists()


def test_merge_command(tmp_path, capsys):
    a = _store(tmp_path / "a.zarr", [3, 2], 0)
    b = _store(tmp_path / "b.zarr", [4], 50)
    assert main(["merge", a, b, str(tmp_path / "m.zarr")]) == 0
    out = capsys.readouterr().out
    assert "3 episodes / 9 steps from 2 store(s)" in out and "only_here" in out
    assert main(["merge", a, str(tmp_path / "m.zarr")]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["merge", a]) == 2


def test_a_killed_merge_leaves_nothing_the_next_merge_does_not_clean(tmp_path):
    """A merge builds beside DST and saves its first source into that build (a build nested in the
    build); a SIGKILL mid-merge leaves both hidden siblings, and the next merge removes them."""
    import subprocess
    import sys

    rb = ReplayBuffer.create_empty("zarr", tmp_path / "a.zarr")
    rb.add_episode({"x": np.arange(6.0)})
    rb.close()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a pid no process has any more
    outer = tmp_path / f".m.zarr.building-{dead}-0123abcd"
    nested = tmp_path / f"..m.zarr.building-{dead}-0123abcd.building-{dead}-4567ef01"
    for d in (outer, nested):
        (d / "data").mkdir(parents=True)
    assert main(["merge", str(tmp_path / "a.zarr"), str(tmp_path / "a.zarr"), str(tmp_path / "m.zarr")]) == 0
    assert not outer.exists() and not nested.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zarr", "m.zarr"]
    np.testing.assert_array_equal(ReplayBuffer.create_from_path(tmp_path / "m.zarr")["x"][:], np.tile(np.arange(6.0), 2))
