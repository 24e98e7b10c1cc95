"""A TFDS ``features.json`` (the JSON form of ``tensorflow_datasets``' ``Feature`` proto) as the leaves an
RLDS import reads: each with its Example key, its place (per step under the ``steps`` Dataset, or
per episode), its type, dtype and shape.

The feature types understood (by the proto field each sets, as TFDS writes them):

* ``featuresDict`` (``FeaturesDict``): nested; its leaves' paths join the names with ``/``;
* ``sequence`` (``Dataset`` / ``Sequence``) at the top level: the RLDS ``steps``, one per episode
  (its leaves are per step: a step's values are the Example's list, flattened, ``T`` × the shape);
* ``tensor`` (``Tensor``, ``Scalar``): ``dtype``, ``shape`` (static), ``encoding`` ``none`` (int64 /
  float lists; bool and every integer as int64, uint64 bit-cast; float64 as float32, as TFDS does),
  ``bytes`` or ``zlib`` (each value's raw bytes);
* ``image`` (``Image``): PNG or JPEG bytes, ``uint8`` (1, 3 or 4 channels) or ``uint16`` (1 channel,
  depth); sides may be unknown (``-1``: taken from the first image);
* ``text`` (``Text``): UTF-8 bytes;
* ``classLabel`` (``ClassLabel``): int64.

Anything else (``video``, ``audio``, ``boundingBox``, a sequence inside the steps — ragged values —, a
tensor of unknown per-step shape) is refused by :func:`parse_features` with an error naming the
feature's path and its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Leaf", "parse_features", "UnsupportedFeature"]

#: TFDS dtype names → NumPy.
DTYPES = {n: np.dtype(n) for n in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                  "uint64", "float16", "float32", "float64")}
DTYPES["bfloat16"] = None  # named in errors
ENCODINGS = ("none", "bytes", "zlib")


class UnsupportedFeature(ValueError):
    """A ``features.json`` entry the reader does not understand; the message names its path and type."""


@dataclass(frozen=True)
class Leaf:
    """One value of an episode: ``path`` (the Example key: ``steps/observation/image``), ``per_step``,
    ``kind`` (``"tensor"``, ``"image"``, ``"text"``), ``dtype`` (NumPy; ``object`` for text),
    ``shape`` (of one step or of the episode's value; ``-1`` for an image side to be read),
    ``encoding`` (a tensor's ``none`` / ``bytes`` / ``zlib``; an image's ``jpeg`` / ``png``),
    ``optional`` (TFDS ``optional=True``: may be absent), ``description`` and ``tfds_class``."""

    path: str
    per_step: bool
    kind: str
    dtype: np.dtype
    shape: tuple[int, ...]
    encoding: str = "none"
    optional: bool = False
    description: str = ""
    tfds_class: str = ""

    @property
    def values_per_step(self) -> int:
        """How many list values one step (or the episode's value) takes in the Example."""
        if self.kind != "tensor" or self.encoding != "none":
            return 1
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def list_kind(self) -> str:
        """The ``Feature`` list kind that holds it: ``bytes_list``, ``float_list`` or ``int64_list``."""
        if self.kind != "tensor" or self.encoding != "none":
            return "bytes_list"
        return "float_list" if self.dtype.kind == "f" else "int64_list"


def _shape(spec: dict, path: str, what: str) -> tuple[int, ...]:
    dims = (spec.get("shape") or {}).get("dimensions") or []
    try:
        return tuple(int(d) for d in dims)
    except (TypeError, ValueError):
        raise UnsupportedFeature(f"features.json: {path}: {what} shape {dims!r} is not a list of integers") from None


def _dtype(name: Any, path: str, what: str) -> np.dtype:
    dtype = DTYPES.get(str(name))
    if dtype is None:
        raise UnsupportedFeature(f"features.json: {path}: {what} of dtype {name!r}, which the RLDS reader does not "
                                 f"read (it reads {', '.join(k for k, v in DTYPES.items() if v is not None)})")
    return dtype


def _kind_of(node: dict) -> str:
    for k in ("featuresDict", "sequence", "tensor", "image", "text", "classLabel", "video", "audio", "boundingBox",
              "boundingBoxes", "translation", "dataset"):
        if k in node:
            return k
    rest = [k for k in node if k not in ("pythonClassName", "description", "metadata", "value")]
    return rest[0] if rest else "?"


def parse_features(doc: dict) -> list[Leaf]:
    """The leaves of a ``features.json`` document, in its order (FeaturesDict members sorted as TFDS
    writes them).

    Raises UnsupportedFeature (a ValueError) naming the path and the type of a feature the reader does
    not understand, or of a top level that is not a FeaturesDict with one ``steps``-like sequence."""
    if not isinstance(doc, dict) or "featuresDict" not in doc:
        raise UnsupportedFeature(f"features.json: the top level is {_class(doc)}, not a FeaturesDict "
                                 "(an RLDS dataset's features are a FeaturesDict holding 'steps')")
    leaves: list[Leaf] = []
    _walk(doc, "", False, leaves)
    paths = [leaf.path for leaf in leaves]
    if not any(leaf.per_step for leaf in leaves):
        raise UnsupportedFeature("features.json: no steps: an RLDS dataset has a Dataset feature ('steps') of "
                                 f"per-step features; this one has only {paths}")
    return leaves


def _class(node: Any) -> str:
    if isinstance(node, dict):
        return str(node.get("pythonClassName") or _kind_of(node)).rsplit(".", 1)[-1]
    return type(node).__name__


def _walk(node: dict, path: str, per_step: bool, out: list[Leaf]) -> None:
    kind = _kind_of(node)
    where = path or "(top level)"
    desc = str(node.get("description", "") or "")
    cls = str(node.get("pythonClassName", "") or "")
    if kind == "featuresDict":
        members = (node["featuresDict"] or {}).get("features") or {}
        for name, child in members.items():
            if not isinstance(child, dict):
                raise UnsupportedFeature(f"features.json: {path + '/' if path else ''}{name}: not a feature entry")
            _walk(child, f"{path}/{name}" if path else name, per_step, out)
        return
    if kind == "sequence":
        seq = node["sequence"] or {}
        if per_step or not path:
            raise UnsupportedFeature(f"features.json: {where}: a {_class(node)} inside the steps (ragged values, "
                                     "stored as ragged_flat_values / ragged_row_lengths): the RLDS reader does not "
                                     "read nested sequences")
        if any(leaf.per_step for leaf in out):
            raise UnsupportedFeature(f"features.json: {where}: a second sequence of steps (the first held "
                                     f"{next(leaf.path for leaf in out if leaf.per_step)}); RLDS has one")
        _walk(seq.get("feature") or {}, path, True, out)
        return
    if kind == "tensor":
        t = node["tensor"] or {}
        dtype = _dtype(t.get("dtype"), where, _class(node))
        shape = _shape(t, where, _class(node))
        encoding = str(t.get("encoding", "none") or "none").lower()
        if encoding not in ENCODINGS:
            raise UnsupportedFeature(f"features.json: {where}: {_class(node)} with encoding {encoding!r} (the reader "
                                     f"reads {', '.join(ENCODINGS)})")
        if any(d < 0 for d in shape):
            raise UnsupportedFeature(f"features.json: {where}: {_class(node)} of shape {shape} (an unknown side: its "
                                     "values are stored with their shape, which the RLDS reader does not read)")
        out.append(Leaf(path, per_step, "tensor", dtype, shape, encoding, bool(t.get("optional", False)), desc, cls))
        return
    if kind == "classLabel":
        out.append(Leaf(path, per_step, "tensor", np.dtype(np.int64), (), "none", False, desc, cls))
        return
    if kind == "image":
        im = node["image"] or {}
        dtype = _dtype(im.get("dtype", "uint8"), where, "Image")
        shape = _shape(im, where, "Image")
        fmt = str(im.get("encodingFormat", "") or "png").lower()
        if fmt not in ("png", "jpeg"):
            raise UnsupportedFeature(f"features.json: {where}: Image with encodingFormat {fmt!r} (the reader reads "
                                     "png and jpeg)")
        if len(shape) != 3 or shape[2] not in (1, 3, 4):
            raise UnsupportedFeature(f"features.json: {where}: Image of shape {shape} (the reader reads (H, W, C), "
                                     "C in 1, 3, 4)")
        if dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)) or (dtype == np.uint16 and shape[2] != 1):
            raise UnsupportedFeature(f"features.json: {where}: Image of dtype {dtype} with {shape[2]} channel(s) (the "
                                     "reader reads uint8 images and uint16 depth images of 1 channel)")
        out.append(Leaf(path, per_step, "image", dtype, shape, fmt, False, desc, cls))
        return
    if kind == "text":
        out.append(Leaf(path, per_step, "text", np.dtype(object), (), "none", False, desc, cls))
        return
    raise UnsupportedFeature(f"features.json: {where}: a feature of type {_class(node)} ({kind}), which the RLDS "
                             "reader does not read; it reads FeaturesDict, Dataset (steps), Tensor, Scalar, "
                             "ClassLabel, Image and Text")
