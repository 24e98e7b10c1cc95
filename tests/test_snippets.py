"""Every Python snippet of the README, the plugin's README and docs/ runs as written (so that a moved
module cannot leave a dead snippet), against real data: the README's in order in one namespace, in a
temp dir holding what its shell commands before them made (``pusht.zarr``: the first Push-T
episodes), with moto's S3 server for the object-storage snippet and the session's local Dask
cluster standing in for the scheduler address of the Dask snippet."""

from __future__ import annotations

import importlib.util
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from shared_data import LEROBOT_V3_2CAM, PUSHT, requires_pusht, requires_v3_2cam

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets(path: Path) -> list[tuple[int, str]]:
    """``(line, code)`` of every ```python block of ``path``."""
    text = path.read_text()
    return [(text[:m.start()].count("\n") + 2, m.group(1)) for m in FENCE.finditer(text)]


def run(path: Path, line: int, code: str, namespace: dict) -> None:
    try:
        exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
    except Exception as exc:
        raise AssertionError(f"the snippet at {path.relative_to(ROOT)}:{line} fails: "
                             f"{type(exc).__name__}: {exc}\n{code}") from exc


def test_every_markdown_file_with_python_is_covered():
    """A new document with Python in it gets a test here too."""
    with_python = {str(p.relative_to(ROOT)) for p in [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"),
                                                     *ROOT.glob("plugins/*/README.md")] if snippets(p)}
    assert with_python == {"README.md", "docs/backends.md", "docs/exports.md", "docs/formats.md", "docs/mixtures.md",
                           "plugins/replaybuf-hdf5/README.md"}


@requires_pusht
@requires_v3_2cam
def test_the_readme_snippets_run_in_order(tmp_path, monkeypatch, s3_server, client):
    from replaybuf_core import import_dataset

    monkeypatch.chdir(tmp_path)
    # what the README's shell commands made before the first snippet: Push-T as pusht.zarr (its first
    # 40 episodes: enough for the windows the snippets ask for), and a LeRobot dataset to import
    import_dataset(PUSHT, "pusht.zarr", "diffusion-policy", episodes="0:40", progress=False)
    shutil.copytree(LEROBOT_V3_2CAM, "lerobot_dataset")
    s3_server.create_bucket("bucket")
    have_torch = importlib.util.find_spec("torch") is not None
    namespace: dict = {"__name__": "__readme__"}
    blocks = snippets(ROOT / "README.md")
    assert len(blocks) >= 7
    ran = 0
    for line, code in blocks:
        if "import torch" in code and not have_torch:
            warnings.warn(f"README.md:{line} needs torch (not installed): not run", stacklevel=1)
            continue
        # the Dask snippet names an example scheduler: the session's local cluster stands in for it
        code = code.replace('"tcp://head:8786"', repr(client.scheduler.address))
        run(ROOT / "README.md", line, code, namespace)
        ran += 1
    # what the snippets say they give, checked against the data read another way
    assert namespace["batch"]["img"].shape[0] in (3, 64)
    assert namespace["b"]["img"].shape == (3, 2, 96, 96, 3) and namespace["b"]["action"].shape == (3, 16, 2)
    from replaybuf_core import ReplayBuffer

    with ReplayBuffer.create_from_path("pusht.zarr") as curated:  # after the curating snippet's edits
        kept = curated.n_episodes
        assert 0 < kept < 37  # 40, less 3 deleted, less those the mask held out
        assert namespace["merged"].n_episodes == 2 * kept and namespace["ro"].n_episodes == kept
        np.testing.assert_array_equal(namespace["ro"].episode_ends, curated.episode_ends)
    assert namespace["report"] is not None and Path("copy.zarr", "zarr.json").exists()
    assert ran == len(blocks) - (0 if have_torch else 1)
    for value in namespace.values():  # writer leases on S3; the snippet's own client of the cluster
        if type(value).__name__ in ("ReplayBuffer", "Client"):
            value.close()


def test_the_sampling_snippet_reads_what_zarr_reads(tmp_path, monkeypatch):
    """The README's first snippet's comment (shapes) holds, and its frames are the source's."""
    pytest.importorskip("zarr")
    if not PUSHT.is_dir():
        pytest.skip(f"Push-T data not found at {PUSHT}")
    import zarr

    from replaybuf_core import import_dataset

    monkeypatch.chdir(tmp_path)
    import_dataset(PUSHT, "pusht.zarr", "diffusion-policy", episodes="0:40", progress=False)
    line, code = snippets(ROOT / "README.md")[0]
    namespace: dict = {}
    run(ROOT / "README.md", line, code, namespace)
    batch, sampler = namespace["batch"], namespace["sampler"]
    assert (batch["img"].shape, batch["action"].shape, batch["_is_pad"].shape) == (
        (3, 16, 96, 96, 3), (3, 16, 2), (3, 16))
    src = zarr.open_group(str(PUSHT), mode="r")
    start, stop, lo, hi = sampler.indices[17]
    img = np.asarray(src["data/img"][start:start + 2]).astype(np.uint8)  # key_first_k: the first 2 frames
    real = ~batch["_is_pad"][1]
    np.testing.assert_array_equal(batch["img"][1][real][:2], img[: int(real[:2].sum())])


@pytest.mark.skipif(importlib.util.find_spec("replaybuf_hdf5") is None, reason="the HDF5 plugin is not installed")
def test_the_backend_guide_snippets_run_as_the_plugin_modules_they_show(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = snippets(ROOT / "docs" / "backends.md")
    assert len(blocks) == 3
    spaces = []
    for line, code in blocks:  # each is a module of the plugin: run it as one (its relative imports resolve)
        namespace = {"__name__": "replaybuf_hdf5._snippet", "__package__": "replaybuf_hdf5"}
        run(ROOT / "docs" / "backends.md", line, code, namespace)
        spaces.append(namespace)
    entry = spaces[0]["Hdf5Entrypoint"]()
    assert entry.guess_can_open("x.h5") and not entry.guess_can_open("x.zarr")
    assert [e.name for e in spaces[1]["replaybuf_backends"]()] == ["hdf5"]
    harness = spaces[2]["Hdf5Harness"](tmp_path)
    buf = harness.make_empty()
    buf.add_episode({"obs": np.arange(6, dtype=np.float32).reshape(3, 2)})
    again = harness.reopen(buf)
    np.testing.assert_array_equal(again["obs"][:], np.arange(6, dtype=np.float32).reshape(3, 2))
    again.close()

    line, code = snippets(ROOT / "plugins" / "replaybuf-hdf5" / "README.md")[0]
    run(ROOT / "plugins" / "replaybuf-hdf5" / "README.md", line, code, {})
    from replaybuf_core import ReplayBuffer

    with ReplayBuffer.create_from_path("demo.zarr") as copy:
        assert copy.n_episodes == 1 and copy["obs"].shape == (50, 7)


def test_the_format_guide_snippet_imports_a_directory_of_npz_episodes(tmp_path):
    from replaybuf_core import ReplayBuffer, import_source

    (line, code), = snippets(ROOT / "docs" / "formats.md")
    namespace: dict = {"__name__": "my_package.replaybuf_plugin"}
    run(ROOT / "docs" / "formats.md", line, code, namespace)
    rng = np.random.default_rng(0)
    episodes = [{"obs": rng.normal(size=(n, 3)).astype(np.float32),
                 "cam": rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)} for n in (5, 8)]
    src = tmp_path / "npz"
    src.mkdir()
    for i, ep in enumerate(episodes):
        np.savez(src / f"episode_{i}.npz", **ep)
    fmt = namespace["NpzFormat"]()
    assert fmt.guess_can_open(str(src)) and [f.name for f in namespace["replaybuf_formats"]()] == ["npz-episodes"]
    import_source(fmt.open(str(src)), tmp_path / "out.zarr", progress=False)
    with ReplayBuffer.create_from_path(tmp_path / "out.zarr") as rb:
        assert rb.n_episodes == 2
        for i, ep in enumerate(episodes):
            got = rb.get_episode(i)
            for key, value in ep.items():
                np.testing.assert_array_equal(got[key], value)


def test_the_export_guide_snippet_writes_and_verifies_npz_episodes(tmp_path):
    from replaybuf_core import ReplayBuffer, export_dataset

    (line, code), = snippets(ROOT / "docs" / "exports.md")
    namespace: dict = {"__name__": "my_package.replaybuf_plugin"}
    run(ROOT / "docs" / "exports.md", line, code, namespace)
    rb = ReplayBuffer.create_empty_numpy()
    rng = np.random.default_rng(0)
    episodes = [{"obs": rng.normal(size=(n, 3)).astype(np.float32)} for n in (4, 7)]
    for ep in episodes:
        rb.add_episode(ep)
    fmt = namespace["NpzExport"]()
    assert [f.name for f in namespace["replaybuf_export_formats"]()] == ["npz-episodes"]
    report = export_dataset(rb, tmp_path / "out", fmt, episodes="1,0", rename="obs=o", progress=False)
    assert report.compared == ["npz: every array read back with numpy, equal to the store"]
    for j, i in enumerate((1, 0)):  # exported in the order asked
        with np.load(tmp_path / "out" / f"episode_{j}.npz") as z:
            np.testing.assert_array_equal(z["o"], episodes[i]["obs"])


@requires_pusht
@requires_v3_2cam
def test_the_mixture_guide_snippets_run_in_order(tmp_path, monkeypatch):
    """docs/mixtures.md: the Python API, the TOML file (its ```toml block written as mix.toml) and the
    torchrun training script, run as one rank of a gloo group; what they print and give is checked."""
    torch = pytest.importorskip("torch")
    import socket

    from replaybuf_core import import_dataset

    monkeypatch.chdir(tmp_path)
    import_dataset(PUSHT, "pusht.zarr", "diffusion-policy", episodes="0:40", progress=False)
    import_dataset(LEROBOT_V3_2CAM, "lerobot.zarr", "lerobot", progress=False)
    doc = ROOT / "docs" / "mixtures.md"
    (toml,) = re.findall(r"^```toml\n(.*?)^```", doc.read_text(), re.S | re.M)
    Path("mix.toml").write_text(toml)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
                 "LOCAL_RANK": "0", "GLOO_SOCKET_IFNAME": "lo"}.items():
        monkeypatch.setenv(k, v)
    namespace: dict = {"__name__": "__mixtures__"}
    blocks = snippets(doc)
    assert len(blocks) == 3
    for line, code in blocks:
        run(doc, line, code, namespace)
    batch = namespace["batch"]
    assert tuple(batch["action"].shape) == (32, 4, 7) and tuple(batch["image.top"].shape) == (32, 96, 96, 3)
    pusht = batch["source_index"] == 0
    assert batch["action_dim_is_pad"][pusht][:, 2:].all() and not batch["action_dim_is_pad"][~pusht].any()
    assert (batch["image.top_is_pad"] == ~pusht).all() and (batch["image.top"][~pusht] == 0).all()
    assert namespace["stats"]["action"]["mean"].shape == (7,)
    ck = torch.load("checkpoint.pt")
    assert ck["loader"]["mixture"] == namespace["mix"].fingerprint and ck["loader"]["epoch"] == 1


@requires_pusht
def test_the_readme_mixture_file_resolves_with_its_weights(tmp_path, monkeypatch):
    """The README's smallest mixture file (its one ```toml block) opens against two Push-T stores, and
    weights 2 : 1 draw the epoch's samples (counted from the batch's ``source_index``, not from what
    the mixture reports): weighted draws, so within 4 binomial standard deviations (~15) of 2/3."""
    from replaybuf_core import import_dataset
    from replaybuf_core.mixture import Mixture

    monkeypatch.chdir(tmp_path)
    import_dataset(PUSHT, "pusht.zarr", "diffusion-policy", episodes="0:10", progress=False)
    shutil.copytree("pusht.zarr", "pusht_copy.zarr")
    (toml,) = re.findall(r"^```toml\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    Path("mix.toml").write_text(toml)
    mix = Mixture.from_toml("mix.toml")
    assert len(mix) == 1024
    batch = mix.sample_batch(np.arange(len(mix)))
    counts = np.bincount(np.asarray(batch["source_index"]), minlength=2)
    assert counts.sum() == 1024 and abs(counts[0] - 1024 * 2 / 3) <= 4 * np.sqrt(1024 * 2 / 9), counts
    assert batch["action"].shape == (1024, 4, 2)
