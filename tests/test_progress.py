"""Long commands say how far they are (issue 47, "said nothing"): ``edit delete|trim|keep``, ``merge`` and
``verify`` show a tqdm bar on stderr as the import does (``--no-progress`` turns it off), counting the bytes
they move or decode; ``export`` counts steps, not keys × steps.

Each bar is watched through tqdm itself (its class replaced by one that records every bar made): its
total comes from a model of the work — the arrays' sizes read with zarr, the steps of the store — and
the bar must end full.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tqdm.auto
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main

T = 10  # steps an episode


@pytest.fixture
def bars(monkeypatch):
    """Every tqdm bar made from here on: (desc, unit, total, n at close, disabled)."""
    made = []

    class Recorded(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            self._asked = kwargs
            super().__init__(*args, **kwargs)

        def close(self):
            if not getattr(self, "_recorded", False):
                self._recorded = True
                k = self._asked
                made.append((k.get("desc"), k.get("unit"), getattr(self, "total", k.get("total")),
                             getattr(self, "n", None), k.get("disable", False)))
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    return made


def _store(path, n_episodes=4, seed=0):
    rng = np.random.default_rng(seed)
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for _ in range(n_episodes):
            rb.add_episode({"img": rng.integers(0, 256, (T, 8, 8, 3), dtype=np.uint8),
                            "action": rng.standard_normal((T, 7)).astype(np.float32)},
                           chunks={"img": (T, 8, 8, 3), "action": (T, 7)})
    return path


def _data_bytes(path) -> int:
    """Decoded bytes of the data arrays, as zarr reads them (the model's side)."""
    g = zarr.open_group(str(path), mode="r")
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for _, a in g["data"].arrays())


def _all_bytes(path) -> int:
    g = zarr.open_group(str(path), mode="r")
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for group in ("data", "meta") for _, a in g[group].arrays()
               if a.shape)


def _only(bars, desc):
    found = [b for b in bars if b[0] == desc]
    assert len(found) == 1, bars
    return found[0]


def test_edit_delete_shows_the_bytes_it_moves(tmp_path, bars, capsys):
    """Deleting episode 0 moves every row: the old rows backed up, the new ones rewritten."""
    store = _store(tmp_path / "s.zarr")
    old = _data_bytes(store)
    assert main(["edit", "delete", str(store), "0"]) == 0
    desc, unit, total, n, disabled = _only(bars, "delete_episodes")
    assert (unit, disabled) == ("B", False)
    assert total == n == old + old * 3 // 4
    assert "delete_episodes" in capsys.readouterr().err  # the bar, on stderr


def test_an_edit_bar_is_drawn_once_its_total_is_known_and_ends_on_its_own_line(tmp_path, capsys):
    """An edit learns its total after its bar is made: the bar was first drawn empty ("0.00B"), and
    when it was held back until the total came, a quick edit closed it without its last line and
    newline (the next output joined it)."""
    store = _store(tmp_path / "s.zarr")
    assert main(["edit", "delete", str(store), "0"]) == 0
    err = capsys.readouterr().err
    draws = [d for d in re.split(r"[\r\n]", err) if d.startswith("delete_episodes")]
    assert draws and not [d for d in draws if "0.00B [" in d], draws
    assert "100%" in draws[-1] and err.endswith("\n"), err[-300:]


def test_edit_trim_and_keep_show_theirs(tmp_path, bars):
    store = _store(tmp_path / "s.zarr")
    per_step = _data_bytes(store) // (4 * T)
    assert main(["edit", "trim", str(store), "--episode", "3", "--start", "2"]) == 0  # the last chunk: rows 30..40
    _, _, total, n, _ = _only(bars, "trim_episode")
    assert total == n == per_step * (T + T - 2)
    with ReplayBuffer(str(store)) as rb:
        rb.store.create_array("meta", "odd", shape=(4,), dtype=bool)
        rb.store.write("meta", "odd", 0, np.array([False, True, False, True]))
    assert main(["edit", "keep", str(store), "--mask", "odd"]) == 0  # from row 0: 38 rows backed up, 18 rewritten
    _, _, total, n, _ = _only(bars, "keep_episodes")
    assert total == n == per_step * (38 + 18)


def test_merge_shows_the_bytes_of_every_source(tmp_path, bars):
    a, b = _store(tmp_path / "a.zarr"), _store(tmp_path / "b.zarr", n_episodes=3, seed=1)
    assert main(["merge", str(a), str(b), str(tmp_path / "m.zarr")]) == 0
    _, unit, total, n, _ = _only(bars, "merging")
    assert unit == "B" and total == n == _data_bytes(a) + _data_bytes(b)


@pytest.mark.parametrize("frames", [None, "fast"])
def test_copy_shows_the_bytes_it_copies(tmp_path, bars, frames):
    """A local copy, as stored or re-encoded (``--frames``): the bar counts every data byte."""
    a = _store(tmp_path / "a.zarr")
    assert main(["copy", str(a), str(tmp_path / "c.zarr")] + (["--frames", frames] if frames else [])) == 0
    _, unit, total, n, _ = _only(bars, "copying")
    assert unit == "B" and total == n == _data_bytes(a)


def test_a_copy_to_a_bucket_shows_its_bar_too(tmp_path, bars, s3_server):
    a = _store(tmp_path / "a.zarr")
    assert main(["copy", str(a), s3_server.new_url()]) == 0
    _, unit, total, n, _ = _only(bars, "copying")
    assert unit == "B" and total == n == _data_bytes(a)


def test_save_to_path_takes_progress_true_as_the_other_verbs_do(tmp_path, bars):
    """``progress=True`` (merge's, edit's, restore's form) shows the copy's bar; it was called as a
    function after the destination was created ("'bool' object is not callable", a half-written store
    left under ``if_exists="raise"``)."""
    a = _store(tmp_path / "a.zarr")
    with ReplayBuffer(str(a)) as rb:
        rb.save_to_path(tmp_path / "c.zarr", progress=True, if_exists="raise")
        rb.save_to_path(tmp_path / "d.zarr", progress=False)
    _, unit, total, n, disabled = _only(bars, "copying")
    assert unit == "B" and total == n == _data_bytes(a) and not disabled
    with ReplayBuffer(str(tmp_path / "c.zarr")) as c:
        np.testing.assert_array_equal(c["img"][:], zarr.open_group(str(a), mode="r")["data/img"][:])


@pytest.mark.parametrize("bad", ["yes", 1])
def test_a_bad_progress_is_refused_before_anything_is_written(tmp_path, bad):
    a = _store(tmp_path / "a.zarr", n_episodes=1)
    with ReplayBuffer(str(a)) as rb, pytest.raises(TypeError, match="progress"):
        rb.save_to_path(tmp_path / "c.zarr", progress=bad, if_exists="raise")
    assert not (tmp_path / "c.zarr").exists()


def test_verify_shows_the_bytes_it_decodes(tmp_path, bars):
    store = _store(tmp_path / "s.zarr")
    assert main(["verify", str(store)]) == 0
    _, unit, total, n, _ = _only(bars, "verifying")
    assert unit == "B" and total == n == _all_bytes(store)


def test_no_progress_shows_nothing(tmp_path, bars, capsys):
    a, b = _store(tmp_path / "a.zarr"), _store(tmp_path / "b.zarr")
    capsys.readouterr()
    for argv in (["edit", "delete", str(a), "0", "--no-progress"], ["verify", str(a), "--no-progress"],
                 ["merge", str(a), str(b), str(tmp_path / "m.zarr"), "--no-progress"],
                 ["copy", str(a), str(tmp_path / "c.zarr"), "--no-progress"]):
        assert main(argv) == 0
    assert capsys.readouterr().err == ""
    assert bars and all(disabled for *_, disabled in bars)


def test_an_export_counts_steps_not_keys_times_steps(tmp_path, bars):
    store = _store(tmp_path / "s.zarr")
    assert main(["export", "diffusion-policy", str(store), str(tmp_path / "e.zarr")]) == 0
    desc, unit, total, n, _ = _only(bars, "exporting (diffusion-policy)")
    assert (unit, total, n) == ("step", 4 * T, 4 * T)
