"""The peer: LeRobot 0.6.1 itself, run beside replaybuf on the same data, for the benchmark tables.

LeRobot 0.6.1 needs Python ≥ 3.12 and its own torch/torchcodec, so it runs in a venv of its own
(``make_lerobot_venv.sh``, default ``benchmarks/peer/.venv-lerobot``, or ``$LEROBOT_VENV``) through a
subprocess: :func:`run_lerobot` runs ``lerobot_reader.py`` there and returns its JSON line.  Nothing
here imports torch or LeRobot.  ``transcode.py`` (our venv, PyAV) makes the MPEG-4 / H.264 copies of
a LeRobot v2.x dataset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
READER = HERE / "lerobot_reader.py"
MAKE_VENV = HERE / "make_lerobot_venv.sh"


def lerobot_venv() -> Path:
    """The LeRobot venv's folder: ``$LEROBOT_VENV``, else ``benchmarks/peer/.venv-lerobot``."""
    return Path(os.environ.get("LEROBOT_VENV") or HERE / ".venv-lerobot")


def lerobot_missing() -> str | None:
    """One line saying why LeRobot 0.6.1 cannot run here (no venv, or no LeRobot in it), else None."""
    python = lerobot_venv() / "bin" / "python"
    if not python.is_file():
        return f"LeRobot 0.6.1 not run: no venv at {lerobot_venv()} (make it: bash {MAKE_VENV.relative_to(HERE.parent.parent)})"
    if not list((lerobot_venv() / "lib").glob("python3.*/site-packages/lerobot-0.6.1.dist-info")):
        return f"LeRobot 0.6.1 not run: {lerobot_venv()} has no lerobot 0.6.1 (re-run {MAKE_VENV.name})"
    return None


def run_lerobot(root: str | os.PathLike, camera: str, workers: int, batches: int, seed: int, *,
                backend: str = "torchcodec", warmup: int = 2, batch_size: int = 64,
                convert_dir: str | os.PathLike | None = None, torch_threads: int | None = None,
                timeout: float = 1800.0) -> dict | None:
    """Read ``root`` (a LeRobot v2.x or v3.x dataset) with LeRobot 0.6.1's own ``LeRobotDataset`` under a
    ``DataLoader(batch_size, shuffle=True, num_workers=workers)``; return ``lerobot_reader.py``'s JSON
    (``cpu_ms_per_sample``, ``samples_per_s``, ``first_batch_s``, ``open_s``, versions, ... — see its
    docstring), or None after printing :func:`lerobot_missing`'s line to stderr when the venv is absent.
    A v2.x ``root`` is converted to v3.0 by LeRobot's own converter, on a copy, under ``convert_dir``
    (default: the reader's, ``$TMPDIR/replaybuf-peer-v30``), once.  ``torch_threads``: torch's
    intra-op threads in the reading process (None: torch's default; with 0 workers, 1 saves the CPU
    that idle OpenMP threads spin away -- see lerobot_reader.py).

    A sample is 2 frames of ``camera`` (t-1, t; float32 CHW) + 16 actions (t-1 .. t+14) + the state.
    Raises RuntimeError (with the reader's last stderr lines) when the reader fails or prints no JSON,
    subprocess.TimeoutExpired after ``timeout`` seconds.
    """
    reason = lerobot_missing()
    if reason:
        print(reason, file=sys.stderr)
        return None
    cmd = [str(lerobot_venv() / "bin" / "python"), str(READER), os.fspath(root), "--camera", camera,
           "--workers", str(workers), "--batches", str(batches), "--seed", str(seed), "--backend", backend,
           "--warmup", str(warmup), "--batch-size", str(batch_size)]
    if convert_dir is not None:
        cmd += ["--convert-dir", os.fspath(convert_dir)]
    if torch_threads is not None:
        cmd += ["--torch-threads", str(torch_threads)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return _json_line(cmd, f"LeRobot reader failed on {root}", timeout, env=env, cwd=HERE)


def _json_line(cmd: list[str], failure: str, timeout: float, **kwargs) -> dict:
    """The last JSON line ``cmd`` prints; RuntimeError(``failure`` + its last stderr lines) when it
    fails or prints none."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"{failure} (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1])


def run_replaybuf(store: str | os.PathLike, camera: str, workers: int, batches: int, seed: int, *,
                  dataset: str = "lerobot", streaming: bool = False, warmup: int = 2, batch_size: int = 64,
                  timeout: float = 1800.0) -> dict:
    """Read ``store`` with replaybuf the way :func:`run_lerobot` reads LeRobot's dataset — the drop-in
    ``LeRobotDataset`` (``dataset="lerobot"``) or the native ``WindowDataset`` (``"window"``, with
    ``streaming`` epochs when asked) under a plain DataLoader — in a process of its own
    (``replaybuf_reader.py``, this venv), and return its JSON line.

    Raises RuntimeError (with the reader's last stderr lines) when it fails or prints no JSON."""
    cmd = [sys.executable, "-m", "benchmarks.peer.replaybuf_reader", os.fspath(store), "--camera", camera,
           "--dataset", dataset, "--workers", str(workers), "--batches", str(batches), "--seed", str(seed),
           "--warmup", str(warmup), "--batch-size", str(batch_size)] + (["--streaming"] if streaming else [])
    return _json_line(cmd, f"replaybuf reader failed on {store}", timeout, cwd=HERE.parent.parent)
