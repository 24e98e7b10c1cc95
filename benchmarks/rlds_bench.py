"""RLDS import: episodes a second per core, and a DROID-sized import projected from the measured rates.

The dataset is written here (``replaybuf_core.testing.rlds_writer``) in DROID's RLDS shape: three
180×320 JPEG cameras (two exterior, one wrist), joint and Cartesian state, a 7-dof action, three
language instructions, the RLDS flags; episodes of ``STEPS`` steps in several shards.  Measured, each in
a fresh interpreter (CPU = user + system of the process, every thread):

* *index*: opening the dataset with no index cache (every record read, both CRCs checked, every
  feature counted) — source MB per CPU-second;
* *read*: every episode read and decoded (``RldsSource.read_episode``, JPEG decoded) — episodes per
  CPU-second;
* *import*: ``replaybuf import rlds`` with ``--frames fast`` (the cameras' JPEG bytes passed through)
  and with the default ``exact`` (decoded, lossless JPEG XL), everything included (index, decode,
  encode, write, bit-for-bit verification) — episodes per CPU-second and source MB per CPU-second.

*Projection*: DROID (RLDS, 1.0.1) is 92,233 episodes and about 1.7 TB; at the import's measured source
bytes per CPU-second, the CPU-hours it takes, and the wall hours on 2 and on 64 cores (the import
scales by shard on Dask: ``--workers``).

*TFDS*: reading the same shards with ``tfds.builder_from_directory(...).as_dataset()`` through
``tfds.as_numpy`` (TensorFlow's own reader, JPEG decoded) — only where an interpreter with TensorFlow
is given (``$REPLAYBUF_TF_PYTHON``, or this one can import tensorflow_datasets); skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .common import Table, dir_bytes

#: DROID's RLDS release: episodes and bytes (the issue's figures).
DROID_EPISODES = 92_233
DROID_BYTES = 1.7e12
STEPS = 120
H, W = 180, 320

_CHILD = r"""
import json, os, sys, time
mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "tfds":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow_datasets as tfds
else:
    from replaybuf_core.formats.rlds.source import RldsSource
    from replaybuf_core.importing import import_dataset
c = os.times(); t = time.perf_counter()  # the interpreter's and the modules' start not counted
if mode == "index":
    n = RldsSource(src, index_cache=False, progress=False).n_episodes
elif mode == "read":
    s = RldsSource(src, progress=False)
    c = os.times(); t = time.perf_counter()
    for i in range(s.n_episodes):
        s.read_episode(i)
    n = s.n_episodes
elif mode == "tfds":
    b = tfds.builder_from_directory(src)
    c = os.times(); t = time.perf_counter()
    n = 0
    for ex in tfds.as_numpy(b.as_dataset(split="train", shuffle_files=False)):
        steps = list(ex["steps"])  # every step's values as NumPy (the images decoded)
        n += 1
else:
    report = import_dataset(src, dst, "rlds", progress=False, overwrite=True, frames=mode,
                            format_options={"index_cache": False})
    assert report.ok, report.problems
    n = report.n_episodes
c2 = os.times()
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": (c2.user - c.user) + (c2.system - c.system),
                  "episodes": n}))
"""


def _features() -> dict:
    f = {f"steps/observation/{cam}": ("image", np.uint8, (H, W, 3), "jpeg")
         for cam in ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left")}
    f.update({
        "steps/observation/joint_position": ("tensor", np.float64, (7,)),
        "steps/observation/cartesian_position": ("tensor", np.float64, (6,)),
        "steps/observation/gripper_position": ("tensor", np.float64, (1,)),
        "steps/action": ("tensor", np.float64, (7,)),
        "steps/reward": ("tensor", np.float32, ()), "steps/discount": ("tensor", np.float32, ()),
        "steps/is_first": ("tensor", np.bool_, ()), "steps/is_last": ("tensor", np.bool_, ()),
        "steps/is_terminal": ("tensor", np.bool_, ()),
        "steps/language_instruction": ("text",), "steps/language_instruction_2": ("text",),
        "steps/language_instruction_3": ("text",),
        "episode_metadata/file_path": ("text",), "episode_metadata/recording_folderpath": ("text",),
    })
    return f


def _scene(t: int, seed: int) -> np.ndarray:
    """Frames with the texture of a camera (smooth gradients, moving blocks, sensor noise)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    base = np.stack([xx / W * 180 + 40, yy / H * 120 + 60, (xx + yy) / (H + W) * 90 + 80], -1)
    out = np.empty((t, H, W, 3), np.uint8)
    for s in range(t):
        img = base.copy()
        x0, y0 = int(40 + 3 * s) % (W - 60), int(30 + 2 * s) % (H - 50)
        img[y0:y0 + 50, x0:x0 + 60] = (200, 40, 40)
        img += rng.normal(0, 4, img.shape)
        out[s] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def _episode(i: int, t: int) -> dict:
    from replaybuf_core.testing.rlds_writer import encode_image

    rng = np.random.default_rng(i)
    ep = {f"steps/observation/{cam}": [encode_image(f, "jpeg") for f in _scene(t, 10 * i + k)]
          for k, cam in enumerate(("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left"))}
    ep.update({
        "steps/observation/joint_position": rng.normal(size=(t, 7)),
        "steps/observation/cartesian_position": rng.normal(size=(t, 6)),
        "steps/observation/gripper_position": rng.random((t, 1)),
        "steps/action": rng.normal(size=(t, 7)),
        "steps/reward": (np.arange(t) == t - 1).astype(np.float32), "steps/discount": np.ones(t, np.float32),
        "steps/is_first": np.arange(t) == 0, "steps/is_last": np.arange(t) == t - 1,
        "steps/is_terminal": np.arange(t) == t - 1,
        "steps/language_instruction": ["put the marker in the cup"] * t,
        "steps/language_instruction_2": ["place the marker inside the cup"] * t,
        "steps/language_instruction_3": [""] * t,
        "episode_metadata/file_path": f"/droid/{i}/trajectory.h5", "episode_metadata/recording_folderpath": f"/droid/{i}",
    })
    return ep


def dataset(root: Path, episodes: int, steps: int, shards: int) -> Path:
    """A DROID-shaped RLDS dataset of ``episodes`` × ``steps`` in ``shards`` shards at ``root``."""
    from replaybuf_core.testing.rlds_writer import write_rlds

    return write_rlds(root, _features(), [_episode(i, steps) for i in range(episodes)], name="droid_like",
                      shards=shards)


def _child(python: str, mode: str, src: Path, dst: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]),
               REPLAYBUF_CACHE=str(dst.parent / "rlds-cache"))  # the shard indexes: not the user's cache
    out = subprocess.run([python, "-c", _CHILD, mode, str(src), str(dst)], check=True, capture_output=True,
                         text=True, env=env, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _tf_python() -> str | None:
    given = os.environ.get("REPLAYBUF_TF_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("tensorflow_datasets") else None


def run(table: Table, tmp: Path, smoke: bool) -> dict:
    """Add the section's rows to ``table``; returns the measurements."""
    n, steps, shards = (3, 12, 2) if smoke else (16, STEPS, 4)
    src = dataset(tmp / "rlds_src", n, steps, shards)
    mb = dir_bytes(src) / 1e6
    out: dict = {"episodes": n, "steps": steps, "source_mb": mb}
    idx = _child(sys.executable, "index", src, tmp / "x")
    table.add("rlds", f"index (CRCs, counts), {n} episodes of {steps} steps", mb / idx["cpu"], "source MB/CPU-s")
    read = _child(sys.executable, "read", src, tmp / "x")
    out["read_eps_per_cpu_s"] = n / read["cpu"]
    table.add("rlds", "read + decode every episode (3 JPEG cameras)", n / read["cpu"], "episodes/CPU-s")
    for frames in ("fast", "exact"):
        dst = tmp / f"rlds_{frames}.zarr"
        r = _child(sys.executable, frames, src, dst)
        eps = n / r["cpu"]
        out[frames] = {"eps_per_cpu_s": eps, "mb_per_cpu_s": mb / r["cpu"], "ratio": dir_bytes(dst) / dir_bytes(src)}
        what = "fast: JPEG passed through" if frames == "fast" else "exact: decoded, JPEG XL"
        table.add("rlds", f"import --frames {what}", eps, "episodes/CPU-s")
        table.add("rlds", f"import --frames {frames}: store / source bytes", out[frames]["ratio"], "x")
        cpu_h = DROID_BYTES / 1e6 / out[frames]["mb_per_cpu_s"] / 3600
        out[frames]["droid_cpu_hours"] = cpu_h
        table.add("rlds", f"DROID (1.7 TB) projected, --frames {frames}", cpu_h, "CPU-hours")
        table.add("rlds", f"DROID projected, --frames {frames}, 64 cores", cpu_h / 64, "hours")
    python = _tf_python()
    if python is None:
        table.add("rlds", "TFDS reading (skipped: no TensorFlow; set REPLAYBUF_TF_PYTHON)", float("nan"), "")
        return out
    tf = _child(python, "tfds", src, tmp / "x")
    out["tfds_eps_per_cpu_s"] = n / tf["cpu"]
    table.add("rlds", "TFDS as_dataset + as_numpy, the same shards", n / tf["cpu"], "episodes/CPU-s")
    table.ratio("rlds", "read per core vs TFDS's", out["read_eps_per_cpu_s"] / out["tfds_eps_per_cpu_s"], ">= 5",
                out["read_eps_per_cpu_s"] >= 5 * out["tfds_eps_per_cpu_s"])
    return out


if __name__ == "__main__":  # python -m benchmarks.rlds_bench [--smoke]
    import tempfile

    t = Table()
    with tempfile.TemporaryDirectory(prefix="replaybuf-rlds-") as d:
        print(json.dumps(run(t, Path(d), "--smoke" in sys.argv), indent=1))
    print(t.render())
