"""Write small RLDS datasets (TFDS prepared directories of TFRecord shards) without TensorFlow, for
tests and benchmarks: ``dataset_info.json``, ``features.json`` and the shards, as TFDS writes them
(the layout of the TFDS-written fixture ``tests/data/rlds``), with the odd cases real data has or
damage makes (gzip shards, absent optional features, truncated files, CRC mismatches: see the tests).

A feature is declared by its Example key and a spec: ``("tensor", dtype, shape)``, ``("image", dtype,
(H, W, C), "jpeg" | "png")``, ``("text",)``; keys under ``steps/`` are per step.  An episode is a dict
key → values (per step: ``(T,) + shape``; text: a list of str); a key left out of an episode is absent
from its Example.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.formats.rlds.example import example_class
from replaybuf_core.formats.rlds.tfrecord import write_records

__all__ = ["features_json", "example_bytes", "write_rlds", "encode_image"]

_CLASSES = {"tensor": "tensor_feature.Tensor", "image": "image_feature.Image", "text": "text_feature.Text"}


def _leaf_json(spec: tuple) -> dict:
    kind = spec[0]
    cls = "tensorflow_datasets.core.features." + _CLASSES[kind]
    if kind == "tensor":
        _, dtype, shape, *rest = spec
        t = {"dtype": np.dtype(dtype).name, "encoding": rest[0] if rest else "none",
             "shape": {"dimensions": [str(d) for d in shape]} if shape else {}}
        if len(rest) > 1 and rest[1]:
            t["optional"] = True
        return {"pythonClassName": cls, "tensor": t}
    if kind == "image":
        _, dtype, shape, fmt = spec
        return {"pythonClassName": cls, "image": {"dtype": np.dtype(dtype).name, "encodingFormat": fmt,
                                                  "shape": {"dimensions": [str(d) for d in shape]}}}
    if kind == "text":
        return {"pythonClassName": cls, "text": {}}
    return dict(spec[1])  # ("raw", {...}): a features.json entry as given


def features_json(features: dict[str, tuple]) -> dict:
    """The ``features.json`` document of ``features`` (key → spec, see the module docstring)."""
    def fdict() -> dict:
        return {"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                "featuresDict": {"features": {}}}

    top = fdict()
    steps = {"pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
             "sequence": {"feature": fdict(), "length": "-1"}}
    for key, spec in features.items():
        parts = key.split("/")
        node = top
        if parts[0] == "steps":
            top["featuresDict"]["features"]["steps"] = steps
            node, parts = steps["sequence"]["feature"], parts[1:]
        for p in parts[:-1]:
            node = node["featuresDict"]["features"].setdefault(p, fdict())
        node["featuresDict"]["features"][parts[-1]] = _leaf_json(spec)
    return top


def encode_image(frame: np.ndarray, fmt: str) -> bytes:
    """One image as PNG (exact) or JPEG (quality 90) bytes, by imagecodecs."""
    import imagecodecs

    frame = np.ascontiguousarray(frame)
    if frame.ndim == 3 and frame.shape[2] == 1:
        frame = frame[..., 0]
    return bytes(imagecodecs.png_encode(frame) if fmt == "png" else imagecodecs.jpeg8_encode(frame, level=90))


def example_bytes(features: dict[str, tuple], episode: dict[str, Any]) -> bytes:
    """One episode as a serialized ``tf.train.Example`` (TFDS's encoding: bool and integers as int64,
    uint64 bit-cast, floats as float32, images and text as bytes)."""
    ex = example_class()()
    for key, values in episode.items():
        spec = features[key]
        feature = ex.features.feature[key]
        if spec[0] == "text":
            vals = [values] if isinstance(values, str) else list(values)
            feature.bytes_list.value.extend(v.encode("utf-8") for v in vals)
        elif spec[0] == "image":
            feature.bytes_list.value.extend(v if isinstance(v, bytes) else encode_image(v, spec[3]) for v in values)
        elif len(spec) > 3 and spec[3] != "none":  # a tensor of bytes-encoded values
            import zlib

            raw = [np.asarray(v, dtype=spec[1]).tobytes() for v in np.asarray(values, dtype=spec[1])]
            feature.bytes_list.value.extend(zlib.compress(r) if spec[3] == "zlib" else r for r in raw)
        else:
            a = np.asarray(values)
            if a.dtype.kind == "f":
                feature.float_list.value.extend(a.astype(np.float32).ravel().tolist())
            else:
                if a.dtype == np.uint64:
                    a = a.view(np.int64)
                feature.int64_list.value.extend(a.astype(np.int64).ravel().tolist())
    return ex.SerializeToString()


def write_rlds(root: str | os.PathLike, features: dict[str, tuple], episodes: list[dict[str, Any]], *,
               name: str = "toy", split: str = "train", shards: int = 1, compress: bool = False,
               records: list[bytes] | None = None) -> Path:
    """Write a TFDS prepared directory at ``root`` (created) holding ``episodes`` in ``split``, spread
    over ``shards`` files in order (the first shards take one more when they do not divide evenly);
    gzip-compressed shards when ``compress``.  ``records``: serialized records to write instead of the
    episodes' Examples (damaged ones).  Returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    data = records if records is not None else [example_bytes(features, ep) for ep in episodes]
    per = [len(data) // shards + (i < len(data) % shards) for i in range(shards)]
    start = 0
    for i, n in enumerate(per):
        write_records(root / f"{name}-{split}.tfrecord-{i:05d}-of-{shards:05d}", data[start:start + n],
                      compress=compress)
        start += n
    info = {"name": name, "version": "1.0.0", "fileFormat": "tfrecord", "description": "written by replaybuf's tests",
            "splits": [{"name": split, "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
                        "shardLengths": [str(n) for n in per], "numBytes": "0"}]}
    (root / "dataset_info.json").write_text(json.dumps(info, indent=2))
    (root / "features.json").write_text(json.dumps(features_json(features), indent=2))
    return root
