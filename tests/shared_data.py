"""Where the real datasets of ``shared/data`` are: beside the repository (CI's layout), else /work/shared.

They are read-only inputs; tests copy them to a temp dir before writing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_CANDIDATES = (
    Path(__file__).resolve().parent.parent.parent / "shared" / "data",
    Path("/work/shared/data"),
)
SHARED_DATA = next((p for p in _CANDIDATES if p.is_dir()), _CANDIDATES[0])
PUSHT = SHARED_DATA / "pusht_cchi_v7_replay.zarr"

requires_pusht = pytest.mark.skipif(not PUSHT.is_dir(), reason=f"Push-T data not found at {PUSHT}")
LEROBOT_V2_GR00T = SHARED_DATA / "lerobot_v2_gr00t_picknplace"
LEROBOT_V3_2CAM = SHARED_DATA / "lerobot_v3_synthetic_2cam"

requires_gr00t = pytest.mark.skipif(not LEROBOT_V2_GR00T.is_dir(), reason=f"GR00T sample not found at {LEROBOT_V2_GR00T}")
requires_v3_2cam = pytest.mark.skipif(not LEROBOT_V3_2CAM.is_dir(), reason=f"v3 fixture not found at {LEROBOT_V3_2CAM}")
