"""A copy that keeps a lossy frame key's codec and layout copies its stored objects byte for byte:
no second lossy generation of JPEG or video frames (found by a new-user trial: a plain ``replaybuf
copy`` of a video store came out at 43.9 dB against the original).  Expected values: the stored
files read directly, and the frames read with zarr-python."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from replaybuf_core.cli import main


def _objects(store: Path, key: str) -> dict[str, bytes]:
    root = store / "data" / key / "c"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("frames", ["fast", "video:g4"])
def test_a_copy_of_a_lossy_store_keeps_its_frames_bit_for_bit(tmp_path, frames, capsys):
    if frames.startswith("video"):
        pytest.importorskip("av")
    src = tmp_path / "s.zarr"
    assert main(["synth", "radial", str(src), "--episodes", "4", "--length", "10", "--image-size", "32",
                 "--frames", frames]) == 0
    for args in ([], ["--frames", "fast" if frames == "fast" else frames]):
        dst = tmp_path / f"c{len(args)}.zarr"
        assert main(["copy", str(src), str(dst), *args]) == 0
        assert _objects(dst, "image") == _objects(src, "image")  # the same stored bytes
        np.testing.assert_array_equal(zarr.open_group(dst, mode="r")["data/image"][:],
                                      zarr.open_group(src, mode="r")["data/image"][:])
        assert main(["verify", str(dst)]) == 0
    capsys.readouterr()


def test_a_copy_into_another_codec_or_of_an_exact_key_goes_row_by_row(tmp_path, capsys):
    src = tmp_path / "s.zarr"
    assert main(["synth", "radial", str(src), "--episodes", "3", "--length", "8", "--image-size", "32",
                 "--frames", "fast"]) == 0
    dst = tmp_path / "e.zarr"
    capsys.readouterr()
    assert main(["copy", str(src), str(dst), "--frames", "exact"]) == 0
    assert "has no form" not in capsys.readouterr().out  # converted as asked: not a backend's fallback
    assert _objects(dst, "image") != _objects(src, "image")
    np.testing.assert_array_equal(zarr.open_group(dst, mode="r")["data/image"][:],
                                  zarr.open_group(src, mode="r")["data/image"][:])  # lossless from the JPEG pixels
    assert main(["verify", str(dst)]) == 0

