"""replaybuf info / verify / view on small buffers made in tmp (and once through a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import zarr
from PIL import Image

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.inspection.summary import buffer_info
from replaybuf_core.inspection.verify import verify_store


@pytest.fixture
def small(tmp_path):
    """A zarr buffer on disk: 3 episodes (5, 7, 4 steps), a uint8 image key and two numeric keys,
    chunks of 4 rows so there are several chunk files per array."""
    path = tmp_path / "small.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    rng = np.random.default_rng(1)
    for T in (5, 7, 4):
        rb.add_episode({"img": rng.integers(0, 256, (T, 16, 16, 3), dtype=np.uint8),
                        "state": rng.normal(size=(T, 3)).astype(np.float32),
                        "action": rng.normal(size=(T, 2))},
                       chunks={"img": (4, 16, 16, 3), "state": (4, 3), "action": (4, 2)} if rb.n_episodes == 0
                       else None)
    return path


def test_info_json_parses(small, capsys):
    assert main(["info", str(small), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_episodes"] == 3 and info["n_steps"] == 16
    assert info["episode_length"] == {"min": 4, "median": 5.0, "max": 7}
    assert info["data"]["state"]["shape"] == [16, 3] and info["data"]["state"]["chunks"] == [4, 3]
    assert info["data"]["img"]["stored_bytes"] > 0 and info["data"]["img"]["compression_ratio"] > 0
    assert "blosc" in info["data"]["state"]["codec"]
    assert list(info["meta"]) == ["episode_ends"]
    assert main(["info", str(small)]) == 0
    assert "episode length: min 4, median 5, max 7" in capsys.readouterr().out


def test_verify_clean_then_nan_is_a_note(small, capsys):
    assert main(["verify", str(small)]) == 0
    assert "OK" in capsys.readouterr().out
    g = zarr.open_group(str(small), mode="r+")
    g["data/state"][6, 1] = np.nan
    problems = verify_store(small)
    assert [p.level for p in problems] == ["note"]
    assert "1 NaN" in problems[0].message and "episode 1" in problems[0].message
    assert main(["verify", str(small)]) == 0


def test_verify_decreasing_episode_ends(small, capsys):
    g = zarr.open_group(str(small), mode="r+")
    g["meta/episode_ends"][:] = np.array([5, 3, 16])
    with pytest.raises(ValueError):  # the buffer itself refuses to open it ...
        ReplayBuffer.create_from_path(small)
    assert main(["verify", str(small)]) == 1  # ... verify reports it
    out = capsys.readouterr().out
    assert "decreases at episode 1" in out and "episode_ends[0]=5 > episode_ends[1]=3" in out
    assert main(["info", str(small)]) == 2  # info needs a valid buffer: a clear error, not a traceback


def test_verify_deleted_and_garbled_chunks(small, capsys):
    chunk = small / "data" / "state" / "c" / "1" / "0"
    assert chunk.exists()
    chunk.unlink()
    (small / "data" / "action" / "c" / "2" / "0").write_bytes(b"not blosc at all")
    problems = [p for p in verify_store(small) if p.level == "error"]
    text = "\n".join(map(str, problems))
    assert "data/state: chunk 1 (rows [4, 8)) is missing" in text
    assert "data/action: chunk 2 (rows [8, 12)) does not decode" in text
    assert main(["verify", str(small)]) == 1
    assert "FAILED: 2 error(s)" in capsys.readouterr().out


def test_verify_short_array(small):
    g = zarr.open_group(str(small), mode="r+")
    g["data/action"].resize((10, 2))
    msgs = [str(p) for p in verify_store(small)]
    assert any("data/action has 10 rows but meta/episode_ends[-1] is 16" in m for m in msgs)


def test_view_writes_png(small, tmp_path, capsys):
    out = tmp_path / "ep.png"
    assert main(["view", str(small), "--episode", "1", str(out)]) == 0
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 300
    assert "7 frames of img" in capsys.readouterr().out
    assert main(["view", str(small), "--episode", "9", str(tmp_path / "x.png")]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["view", str(small), "--episode", "0", "--key", "state", str(tmp_path / "y.png")]) == 2
    assert "not an image key" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "y.png").exists()


def test_read_only_nothing_changes(small):
    before = {p: p.stat().st_mtime_ns for p in small.rglob("*")}
    buffer_info(small)
    verify_store(small)
    main(["view", str(small), "--episode", "0", str(small.parent / "v.png")])
    assert {p: p.stat().st_mtime_ns for p in small.rglob("*")} == before


def test_info_via_subprocess(small):
    r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "info", "--json", str(small)],
                       capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["n_steps"] == 16
