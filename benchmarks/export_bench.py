"""Export: the imported Push-T store written back out as each export format (LeRobot v3.0,
diffusion_policy's zarr v2, robomimic HDF5), each verified by its independent reader as part of the
export; seconds and bytes beside the import of the same store, measured in this run."""

from __future__ import annotations

import time
from pathlib import Path

from replaybuf_core.exporting import export_dataset

from .common import Table, dir_bytes

#: Push-T's keys are diffusion_policy's; the other libraries want their own names
SETTINGS = {
    "diffusion-policy": {},
    "robomimic": {"rename": {"action": "actions", "img": "obs.img", "state": "obs.state"}},
    "lerobot": {"rename": {"img": "observation.image", "state": "observation.state"}, "fps": 10,
                "task": "Push the T-shaped block onto the T-shaped target."},
}


def run(table: Table, store: Path, tmp: Path, import_seconds: float) -> None:
    for name, options in SETTINGS.items():
        out = tmp / f"export-{name}"
        t0 = time.perf_counter()
        report = export_dataset(store, out, name, progress=False, **options)
        seconds = time.perf_counter() - t0
        size = dir_bytes(out) if out.is_dir() else out.stat().st_size
        table.add("export", f"{name}: export ({report.n_steps} steps, verified)", seconds, "s")
        table.add("export", f"{name}: bytes", size / 2**20, "MiB")
        table.ratio("export", f"{name} export time / import time", seconds / import_seconds, "(shown)", True)
        for camera, db in report.psnr.items():
            table.add("export", f"{name}: {camera} video PSNR vs the store", db, "dB", "{:.1f}")
