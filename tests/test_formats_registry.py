"""Import formats are plugins: the example of docs/formats.md registers, is guessed and imports;
broken or duplicate formats warn without hiding the others."""

from __future__ import annotations

import re
import types
from pathlib import Path

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer, registry
from replaybuf_core.errors import FormatNotFoundError
from replaybuf_core.hookspecs import hookimpl
from replaybuf_core.importing import import_dataset
from replaybuf_zarr.codecs import WebPCodec

DOC = Path(__file__).resolve().parent.parent / "docs" / "formats.md"


@pytest.fixture
def plugin():
    """Register a plugin module for one test, then forget it."""
    registered = []

    def register(module):
        registry.get_plugin_manager().register(module, name=module.__name__)
        registry._formats.cache_clear()
        registered.append(module)

    yield register
    for m in registered:
        registry.get_plugin_manager().unregister(m)
    registry._formats.cache_clear()


def _doc_example() -> types.ModuleType:
    code = re.search(r"```python\n(# my_package/replaybuf_plugin.py\n.*?)```", DOC.read_text(), re.S).group(1)
    module = types.ModuleType("doc_npz_plugin")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


def test_the_documented_format_plugin_works(tmp_path, plugin):
    plugin(_doc_example())
    assert "npz-episodes" in registry.list_formats()
    src = tmp_path / "npz"
    src.mkdir()
    rng = np.random.default_rng(0)
    eps = []
    for i, n in enumerate([5, 8, 3]):
        ep = {"obs": rng.random((n, 4)).astype("f8"), "img": rng.integers(0, 255, (n, 8, 8, 3), dtype=np.uint8)}
        np.savez(src / f"episode_{i:03d}.npz", **ep)
        eps.append(ep)
    report = import_dataset(src, tmp_path / "out.zarr", progress=False)  # guessed
    assert report.ok and report.format == "npz-episodes"
    rb = ReplayBuffer.create_from_path(tmp_path / "out.zarr")
    np.testing.assert_array_equal(rb["obs"][:], np.concatenate([e["obs"] for e in eps]))
    np.testing.assert_array_equal(rb["img"][:], np.concatenate([e["img"] for e in eps]))
    assert rb.get_compressors()["img"] == WebPCodec(level=0, lossless=True, method=1)  # exact, 8x8 frames


def test_broken_and_duplicate_formats_warn_and_the_others_stay(plugin):
    broken = types.ModuleType("broken_formats")

    @hookimpl
    def replaybuf_formats():
        raise RuntimeError("boom")

    broken.replaybuf_formats = replaybuf_formats
    dup = types.ModuleType("dup_formats")
    from replaybuf_core.formats.lerobot import LeRobotFormat

    class Again(LeRobotFormat):
        pass

    @hookimpl
    def replaybuf_formats_dup():
        return [Again, "not a format"]

    dup.replaybuf_formats = replaybuf_formats_dup
    plugin(broken)
    plugin(dup)
    with pytest.warns(RuntimeWarning) as record:
        formats = registry.list_formats()
    text = " ".join(str(w.message) for w in record)
    assert "raised in replaybuf_formats() and is skipped: RuntimeError: boom" in text
    assert "two replaybuf formats are named 'lerobot'" in text
    assert "which is not a named FormatEntrypoint" in text
    assert formats["lerobot"].entrypoint.__class__ is LeRobotFormat  # the first loaded wins
    assert "diffusion-policy" in formats


def test_unknown_and_unrecognised_sources_name_the_installed_formats(tmp_path, monkeypatch):
    with pytest.raises(FormatNotFoundError, match="no replaybuf import format named 'x'; installed formats: "
                                                  "d3rlpy, diffusion-policy, lerobot, maniskill, minari, rlds, robomimic"):
        registry.get_format("x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatNotFoundError, match=r"no installed import format recognises it.*lerobot: LeRobot "
                                                  r"dataset") as err:
        registry.guess_format(tmp_path / "empty")
    assert "pip install" not in str(err.value)  # every extra is installed here: no hint to install one
    monkeypatch.setattr(registry, "EXTRA_MODULES", {"lerobot": ("no_such_module_here",)})
    with pytest.raises(FormatNotFoundError, match=r"lerobot: LeRobot dataset.*needs `pip install replaybuf\[lerobot\]`"):
        registry.guess_format(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        registry.guess_format(tmp_path / "missing")
    with pytest.raises(FormatNotFoundError, match="URLs are not import sources"):
        registry.guess_format("s3://bucket/data")


def test_a_source_whose_reader_is_missing_names_the_extra(tmp_path, monkeypatch):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "demo.hdf5", "w") as f:
        f.create_dataset("data/demo_0/actions", data=np.zeros((3, 2)))
    assert registry.guess_format(tmp_path / "demo.hdf5").name == "robomimic"
    monkeypatch.setattr(registry, "EXTRA_MODULES", {"hdf5": ("no_such_module_here",)})
    # the guess cannot look inside without h5py (simulated by failing it); the signature still says HDF5
    from replaybuf_core.formats.hdf5.robomimic import RobomimicFormat

    monkeypatch.setattr(RobomimicFormat, "guess_can_open", lambda self, p: False)
    with pytest.raises(FormatNotFoundError, match=r"looks like a robomimic.* dataset, whose reader is not installed: "
                                                  r"pip install 'replaybuf\[hdf5\]'"):
        registry.guess_format(tmp_path / "demo.hdf5")
