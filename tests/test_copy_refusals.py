"""What ``replaybuf copy`` / ``merge`` and ``save_to_path`` never do: replace a directory or file that
is not a store (a new-user trial lost a working directory to ``copy SRC SRC/.. --overwrite``), or
copy a store into itself, into a place inside it, or over a directory holding it.  Every refusal
leaves both sides as they were (their files read back byte for byte)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.locations import check_apart
from replaybuf_core.testing import make_episode
from replaybuf_core.testing.files import file_digests


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "work" / "src.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for i in range(3):
            rb.add_episode(make_episode(4 + i, seed=i))
    return path


def test_what_is_not_a_store_is_never_replaced(store, tmp_path, capsys):
    work = store.parent
    (work / "notes").mkdir()
    (work / "notes" / "thesis.txt").write_text("four years")
    (work / "afile").write_text("keep me")
    (work / "named.zarr").mkdir()  # a store's name is not enough
    (work / "named.zarr" / "thesis.tex").write_text("more years")
    (work / "model.h5").write_text("not even HDF5")
    before = file_digests(tmp_path)
    for argv in (["copy", str(store), str(work / "named.zarr"), "--overwrite"],
                 ["copy", str(store), str(work / "model.h5"), "--overwrite"],
                 ["copy", str(store), str(work / "notes"), "--overwrite"],
                 ["copy", str(store), str(work / "afile"), "--overwrite"],
                 ["merge", str(store), str(store), str(work / "notes"), "--overwrite"]):
        assert main(argv) == 2
        assert "is not a store" in capsys.readouterr().err
    with ReplayBuffer.create_from_path(store) as rb:
        with pytest.raises(FileExistsError, match="not a store"):
            rb.save_to_path(work / "notes")
    assert file_digests(tmp_path) == before
    assert sorted(os.listdir(work)) == ["afile", "model.h5", "named.zarr", "notes", "src.zarr"]  # no build beside
    empty = work / "empty"
    empty.mkdir()  # an empty directory holds nothing to lose: replaced
    assert main(["copy", str(store), str(empty), "--overwrite"]) == 0
    with ReplayBuffer.create_from_path(empty) as rb:
        assert rb.n_episodes == 3


def test_a_store_is_never_copied_into_itself_or_over_what_holds_it(store, tmp_path, capsys):
    work = store.parent
    os.symlink(store, work / "link.zarr")
    before = file_digests(tmp_path)
    for dst, said in ((work / "link.zarr" / "..", "lies inside DST"), (store / "nested.zarr", "lies inside SRC"),
                      (store / "data" / "x.zarr", "lies inside SRC"), (f"{store}/./", "is SRC"),
                      (work / "link.zarr", "is SRC")):
        assert main(["copy", str(store), str(dst), "--overwrite"]) == 2
        assert said in capsys.readouterr().err, dst
    inner = store / "data"
    assert main(["copy", str(inner), str(store), "--overwrite"]) == 2  # (not even a store; refused first)
    assert "lies inside DST" in capsys.readouterr().err
    with ReplayBuffer.create_from_path(store) as rb:
        with pytest.raises(ValueError, match="lies inside SRC"):
            rb.save_to_path(store / "nested.zarr")
        assert np.array_equal(rb.episode_ends, [4, 9, 15])
    assert file_digests(tmp_path) == before


@pytest.mark.parametrize("src, dst, ok", [
    ("s3://b/x.zarr", "s3://b/x.zarr/", False),
    ("s3://b/x.zarr", "s3://b/x.zarr/n.zarr", False),
    ("s3://b/x.zarr/n.zarr", "s3://b/x.zarr", False),
    ("s3://b/x.zarr", "s3://b/x.zarr2", True),
    ("s3://b/x.zarr", "gs://b/x.zarr", True),
    ("s3://b/x.zarr", "/tmp/x.zarr", True),
])
def test_urls_are_compared_by_bucket_and_keys(src, dst, ok):
    if ok:
        check_apart(src, dst)
    else:
        with pytest.raises(ValueError, match="SRC"):
            check_apart(src, dst)


def test_a_symlink_destination_is_replaced_never_its_target_by_copy_and_import_alike(store, tmp_path):
    """One rule for every command that replaces a store: the link at DST is replaced by the new
    store; the store it pointed to is left as it was (its files read back byte for byte)."""
    import zarr

    from replaybuf_core.importing import import_dataset

    target = tmp_path / "elsewhere" / "kept.zarr"
    with ReplayBuffer.create_empty("zarr", str(target)) as rb:
        rb.add_episode(make_episode(7, seed=9))
    kept = file_digests(target)
    dp = tmp_path / "dp.zarr"  # a small diffusion_policy-style source for the import
    g = zarr.open_group(str(dp), mode="w", zarr_format=2)
    g.create_array("data/obs", data=np.arange(10, dtype=np.float32).reshape(5, 2), chunks=(5, 2))
    g.create_array("meta/episode_ends", data=np.array([2, 5], np.int64))
    for i, (how, run) in enumerate([
            ("copy", lambda link: main(["copy", str(store), str(link), "--overwrite"])),
            ("import", lambda link: 0 if import_dataset(dp, link, "diffusion-policy", overwrite=True,
                                                       progress=False).ok else 1)]):
        link = tmp_path / f"link{i}.zarr"
        os.symlink(target, link)
        assert run(link) == 0, how
        assert not link.is_symlink() and link.is_dir(), how
        with ReplayBuffer.create_from_path(str(link)) as rb:
            assert rb.n_episodes == (3 if how == "copy" else 2), how
        assert file_digests(target) == kept, how
