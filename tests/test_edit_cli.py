"""``replaybuf edit`` and ``replaybuf rechunk`` from the shell: results read back through zarr-python
(another path than the code under test), refusals exit 2 and change nothing, an interrupted edit
exits 130 (143 for SIGTERM) with the store as before."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import _Terminated, main
from replaybuf_core.store import editing


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    for i, n in enumerate([4, 6, 3, 5]):
        rb.add_episode({"x": np.arange(n, dtype=np.int64) + 100 * i,
                        "img": np.full((n, 4, 4, 3), i, np.uint8)})
    rb.update_meta({"val": np.array([True, False, True, False])})
    rb.close()
    return path


def _zarr(path):
    g = zarr.open_group(str(path), mode="r")
    return g["meta/episode_ends"][:].tolist(), g["data/x"][:].tolist()


def test_edit_commands(store, capsys):
    assert main(["edit", "delete", str(store), "1"]) == 0
    assert "4 episodes / 18 steps -> 3 episodes / 12 steps" in capsys.readouterr().out
    assert _zarr(store) == ([4, 7, 12], [0, 1, 2, 3, 200, 201, 202, 300, 301, 302, 303, 304])
    assert main(["edit", "trim", str(store), "--episode", "2", "--start", "1", "--stop", "3"]) == 0
    assert _zarr(store) == ([4, 7, 9], [0, 1, 2, 3, 200, 201, 202, 301, 302])
    assert main(["edit", "keep", str(store), "--mask", "val"]) == 0  # val followed the delete: T, T, F
    assert _zarr(store) == ([4, 7], [0, 1, 2, 3, 200, 201, 202])
    assert main(["verify", str(store)]) == 0


@pytest.mark.parametrize("argv, message", [
    (["edit", "delete", "{}", "9"], "out of range"),
    (["edit", "delete", "{}", "x"], "episodes"),
    (["edit", "delete", "{}", "::-1"], "selects all 4 episodes"),
    (["edit", "delete", "{}", "0:2", "2:"], "pass --all to delete every episode"),
    (["edit", "trim", "{}", "--episode", "0", "--start", "3", "--stop", "2"], "0 <= start < stop"),
    (["edit", "keep", "{}", "--mask", "nope"], "no meta array 'nope'"),
    (["rechunk", "{}", "--chunk-length", "nope=3"], "no data key 'nope'"),
    (["rechunk", "{}", "--chunk-length", "x=0"], "positive integer"),
    (["rechunk", "{}", "--compressor", "x=zip"], "unknown compressor name 'zip'"),
    (["rechunk", "{}"], "nothing to do"),
])
def test_refusals_change_nothing(store, capsys, argv, message):
    before = _zarr(store)
    assert main([a.format(store) for a in argv]) == 2
    assert message in capsys.readouterr().err
    assert _zarr(store) == before


def test_rechunk_command_keeps_frames_on_their_codec(store, capsys):
    img_codec = zarr.open_group(str(store), mode="r")["data/img"].metadata.to_dict()["codecs"]
    assert main(["rechunk", str(store), "--chunk-length", "x=2", "--compressor", "*=disk"]) == 0
    g = zarr.open_group(str(store), mode="r")
    assert g["data/x"].chunks == (2,)
    assert "zstd" in str(g["data/x"].metadata.to_dict()["codecs"])
    assert g["data/img"].metadata.to_dict()["codecs"] == img_codec
    assert _zarr(store)[1] == [0, 1, 2, 3] + list(range(100, 106)) + [200, 201, 202] + list(range(300, 305))


def test_star_chunk_length_leaves_frames_and_out_of_range_trim_exits_2(store, capsys):
    img_chunks = zarr.open_group(str(store), mode="r")["data/img"].chunks
    assert main(["rechunk", str(store), "--chunk-length", "*=3"]) == 0
    g = zarr.open_group(str(store), mode="r")
    assert g["data/x"].chunks == (3,) and g["data/img"].chunks == img_chunks
    before = _zarr(store)
    assert main(["edit", "trim", str(store), "--episode", "25"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert _zarr(store) == before


def test_deleting_every_episode_needs_all(store, capsys):
    assert main(["edit", "delete", str(store), "::-1", "--all"]) == 0
    assert _zarr(store) == ([], [])


@pytest.mark.parametrize("interrupt, code, line", [(KeyboardInterrupt, 130, "replaybuf edit: interrupted"),
                                                   (_Terminated, 143, "replaybuf edit: terminated (SIGTERM)")])
def test_an_interrupted_edit_exits_with_one_line_and_the_store_as_before(store, capsys, monkeypatch, interrupt, code,
                                                                         line):
    before = _zarr(store)
    real_gather = editing._runs_rows
    calls = []

    def interrupted_gather(*args):  # Ctrl-C while the rows move (the journal written, one block rewritten)
        calls.append(args)
        if len(calls) == 2:
            raise interrupt()
        return real_gather(*args)

    monkeypatch.setattr(editing, "_runs_rows", interrupted_gather)
    assert main(["edit", "delete", str(store), "1", "--no-progress"]) == code
    assert len(calls) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == ("", [line])
    assert _zarr(store) == before
    g = zarr.open_group(str(store), mode="r")
    assert editing.EDIT_JOURNAL not in {k for k, v in g["meta"].attrs.asdict().items() if v is not None}
    assert not [n for grp in ("data", "meta") for n, _ in g[grp].arrays() if n.startswith(editing.UNDO_PREFIX)]
    assert "versions" not in g or not list(g["versions"].arrays())  # the rolled-back edit's backups: gone
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ReplayBuffer.create_from_path(store) as ro:
            assert ro.recovery.clean and ro.n_episodes == 4


def test_refusals_name_the_store_and_list_only_its_masks(store, capsys):
    """An index out of range is said of the store (not of an import's "source"); a missing mask lists
    the store's masks — bool meta arrays, one value per episode — never its statistics (``_stats.*``),
    nor per-episode arrays of other dtypes; a store without masks says so."""
    with ReplayBuffer(str(store)) as rb:
        rb.get_stats()  # writes the internal meta/_stats.* arrays
        rb.update_meta({"score": np.arange(4, dtype=np.float32)})
        internal = [n for n in rb.store.list_arrays("meta") if n.startswith("_")]
    assert internal  # (what the old message listed)
    before = _zarr(store)
    assert main(["edit", "delete", str(store), "999"]) == 2
    err = capsys.readouterr().err
    assert f"index 999 is out of range; the store {store} has 4 episodes (0..3)" in err and "source" not in err
    assert main(["edit", "keep", str(store), "--mask", "train"]) == 2
    err = capsys.readouterr().err
    assert "no meta array 'train'" in err and "['val']" in err, err
    assert "_stats" not in err and "score" not in err and "episode_ends" not in err, err
    with ReplayBuffer(str(store)) as rb:
        rb.update_meta({"val": np.array([1, 0, 1, 0], np.uint8)})  # no bool per-episode array any more
    assert main(["edit", "keep", str(store), "--mask", "train"]) == 2
    err = capsys.readouterr().err
    assert "has no mask" in err and "'score'" in err and "_stats" not in err, err
    assert _zarr(store) == before
