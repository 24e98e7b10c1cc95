"""The ``rlds`` import format: RLDS / Open X-Embodiment datasets as TFDS prepared directories of
TFRecord shards, read without TensorFlow (:mod:`.tfrecord`: the framing and its CRCs; :mod:`.example`:
``tf.train.Example`` through protobuf; :mod:`.features`: ``features.json``; :mod:`.source`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from replaybuf_core.source import FormatEntrypoint


def _root(path: str | os.PathLike) -> Path | None:
    try:
        from .source import find_root

        return find_root(path)
    except (FileNotFoundError, OSError):
        return None


class RldsFormat(FormatEntrypoint):
    """Entry point of the ``rlds`` format (see :class:`.source.RldsSource`)."""

    name = "rlds"
    description = ("RLDS / Open X-Embodiment: a TFDS prepared directory (dataset_info.json, features.json, "
                   "<name>-<split>.tfrecord-NNNNN-of-MMMMM shards), read without TensorFlow")
    requires = "rlds"

    def might_open(self, path: str | os.PathLike) -> bool:
        """A TFDS prepared directory of TFRecord shards (``dataset_info.json`` with ``fileFormat``
        tfrecord, and ``features.json``).  Never raises."""
        root = _root(path)
        if root is None or not (root / "features.json").is_file():
            return False
        try:
            info = json.loads((root / "dataset_info.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(info, dict) and (info.get("fileFormat") or "tfrecord") == "tfrecord" and "splits" in info

    def guess_can_open(self, path: str | os.PathLike) -> bool:
        """:meth:`might_open`, with protobuf importable."""
        from replaybuf_core.registry import extra_ready

        return self.might_open(path) and extra_ready(self.requires)

    def open(self, path: str | os.PathLike, **options: Any):
        """An :class:`.source.RldsSource`; options: ``split``, ``skip_bad_episodes``, ``jpeg``, ``progress``."""
        from .source import RldsSource

        return RldsSource(path, **options)

    def add_arguments(self, group) -> list[str]:
        group.add_argument("--split", default=None, metavar="NAME",
                           help="rlds: the split to import (default train, or the only split)")
        group.add_argument("--skip-bad-episodes", action="store_true", default=None,
                           help="rlds: leave out episodes that cannot be read (truncated shard, CRC mismatch, absent "
                                "shard, step counts that disagree) and report them, instead of refusing the import")
        group.add_argument("--jpeg", default=None, choices=["passthrough", "reencode"],
                           help="rlds: JPEG cameras with a JPEG --frames codec (fast, jpeg:Q) keep the source's JPEG "
                                "bytes (passthrough, the default) or are encoded again (reencode)")
        return ["split", "skip_bad_episodes", "jpeg"]
