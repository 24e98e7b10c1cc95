"""The ``lerobot`` import format: LeRobot datasets v2.0, v2.1 and v3.0 (parquet rows read with
pyarrow, mp4 videos decoded with PyAV; no dependency on ``lerobot``, ``datasets`` or torch).  Install
the readers with ``pip install 'replaybuf[lerobot]'``.  See :mod:`.source` for what is imported and
:mod:`.video` for how frames are matched to rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

from replaybuf_core.source import FormatEntrypoint

__all__ = ["LeRobotFormat"]


class LeRobotFormat(FormatEntrypoint):
    """``lerobot``: a directory with ``meta/info.json`` whose ``codebase_version`` is v2.x or v3.x."""

    name = "lerobot"
    description = "LeRobot dataset v2.0/v2.1/v3.0 (meta/info.json, parquet rows, mp4 videos)"
    requires = "lerobot"

    def guess_can_open(self, path) -> bool:
        info = Path(os.path.expanduser(os.fspath(path))) / "meta" / "info.json"
        if not info.is_file():
            return False
        try:
            version = json.loads(info.read_text()).get("codebase_version", "")
        except (OSError, ValueError, AttributeError):
            return False
        return isinstance(version, str) and version.startswith(("v2", "v3"))

    def might_open(self, path) -> bool:
        return self.guess_can_open(path)  # meta/info.json says it: no reader needed

    def open(self, path, **options):
        from .source import LeRobotSource

        return LeRobotSource(path, **options)

    def add_arguments(self, group) -> list[str]:
        group.add_argument("--tolerance-s", dest="tolerance_s", type=float, default=None, metavar="S",
                           help="lerobot: how far (s) a frame may sit from its row's time (default 1e-4)")
        group.add_argument("--align-video-start", dest="align_video_start", action="store_true", default=None,
                           help="lerobot: give each episode's first row the episode's first frame (rows whose "
                                "timestamps are offset from the video, e.g. GR00T's 0.05 s)")
        group.add_argument("--skip-camera", dest="skip_cameras", action="append", default=None, metavar="KEY",
                           help="lerobot: leave this camera out (repeatable)")
        group.add_argument("--skip-episodes-without-video", dest="skip_episodes_without_video",
                           action="store_true", default=None,
                           help="lerobot: leave out (and report) episodes whose video of some camera is missing")
        group.add_argument("--find-moved-files", dest="find_moved_files", action="store_true", default=None,
                           help="lerobot: use the one file of the expected name elsewhere in the dataset when "
                                "a file is not where info.json's path templates say")
        group.add_argument("--video", dest="video", choices=("reencode", "passthrough"), default=None,
                           help="lerobot: reencode (default: decode and store with --frames) or passthrough: keep "
                                "each camera's mp4 packets when its GOPs allow (short closed GOPs, no B-frames, "
                                "8-bit H.264/AV1), bit-exact to PyAV's decode; the report says which cameras "
                                "went through and why the others were re-encoded")
        return ["tolerance_s", "align_video_start", "skip_cameras", "skip_episodes_without_video",
                "find_moved_files", "video"]
