"""Dataset schemas: the arrays a buffer will hold, declared before any episode is written."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .chunks import check_chunks_compatible
from .keys import check_key

SPEC_FIELDS = ("shape", "chunks", "dtype", "needs_compressor")
#: largest chunk a spec may ask for (bytes)
MAX_CHUNK_BYTES = 2**31 - 1


#: Channel counts of a camera frame (gray, RGB, RGBA) — what an image codec stores as pixels.
FRAME_CHANNELS = (1, 3, 4)
#: Sides (px) of what is stored as an image: smaller "frames" are numbers; WebP's own limit is
#: 16383 px and imagecodecs only takes sides < 16383.
MIN_FRAME_SIDE, MAX_FRAME_SIDE = 8, 16382


def is_frame_shape(shape: tuple[int, ...]) -> bool:
    """True for ``(N, H, W, C)`` camera frames: channels last, ``C`` in 1/3/4, ``8 <= H, W <= 16382``.
    Channels-first ``(N, C, H, W)`` stacks, ``(N, H, W, 2)`` flow fields and tiny grids are not."""
    shape = tuple(int(s) for s in shape)
    return (len(shape) == 4 and shape[3] in FRAME_CHANNELS
            and all(MIN_FRAME_SIDE <= s <= MAX_FRAME_SIDE for s in shape[1:3]))


def is_string_dtype_spec(dtype: Any) -> bool:
    """True when a spec's dtype names text: ``"str"``, ``str``, ``object``, or a NumPy ``U``/``T`` dtype
    (seed-style schemas write ``"dtype": "str"`` for language annotations)."""
    if dtype is str or dtype == "str":
        return True
    try:
        return np.dtype(dtype).kind in "OUT"
    except TypeError:
        return False


def is_uint8_image_spec(spec: Mapping[str, Any]) -> bool:
    """True for a camera-frame spec, stored as images (WebP): uint8 with :func:`is_frame_shape`.
    Other uint8 arrays — channels-first ``(0, C, H, W)`` frame stacks, ``(0, H, W, 2)`` flow — are
    numbers (Blosc)."""
    if is_string_dtype_spec(spec["dtype"]) or np.dtype(spec["dtype"]) != np.uint8:
        return False
    return is_frame_shape(tuple(spec["shape"]))


def normalize_array_spec(key: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """Check and normalise one array spec ``{shape (0, ...), chunks, dtype, needs_compressor}``.
    A text dtype (``"str"``, ``object``, ``U``) becomes ``object`` (arrays of ``str``).

    Raises:
        KeyError: a field is missing (names key and field).
        ValueError: shape does not start with 0, chunks invalid for the shape, or a chunk over 2 GiB.
        TypeError: non-integral chunks, a dtype NumPy does not know, ``needs_compressor`` not a bool.
    """
    missing = [f for f in SPEC_FIELDS if f not in spec]
    if missing:
        raise KeyError(f"array spec {key!r} lacks {missing} (fields: {SPEC_FIELDS})")
    shape = tuple(int(s) for s in spec["shape"])
    if not shape or shape[0] != 0:
        raise ValueError(f"array spec {key!r}: shape {shape} must be (0, ...) — episodes are appended on axis 0")
    chunks = tuple(spec["chunks"])
    check_chunks_compatible(chunks, shape)
    if is_string_dtype_spec(spec["dtype"]):
        dtype = np.dtype(object)  # text: object arrays of str, as everything replaybuf returns
    else:
        try:
            dtype = np.dtype(spec["dtype"])
        except TypeError as exc:
            raise TypeError(f"array spec {key!r}: bad dtype {spec['dtype']!r}: {exc}") from None
    if not isinstance(spec["needs_compressor"], (bool, np.bool_)):
        raise TypeError(f"array spec {key!r}: needs_compressor must be True or False, got "
                        f"{spec['needs_compressor']!r}")
    chunks = tuple(int(c) for c in chunks)
    item = 64 if dtype == object else dtype.itemsize
    chunk_bytes = item * int(np.prod(chunks, dtype=object))
    if chunk_bytes > MAX_CHUNK_BYTES:
        raise ValueError(f"array spec {key!r}: chunks {chunks} hold {chunk_bytes:,} bytes; a chunk may hold "
                         f"at most {MAX_CHUNK_BYTES:,} (2 GiB: Blosc's limit, and it is read whole)")
    return {"shape": shape, "chunks": chunks, "dtype": dtype,
            "needs_compressor": bool(spec["needs_compressor"])}


@dataclass(frozen=True)
class DatasetSchema:
    """Where a dataset goes and which arrays it holds.

    Args:
        zarr_path: output store path (``~`` expanded).
        array_specs: key → ``{"shape": (0, *step_shape), "chunks": tuple, "dtype": dtype,
            "needs_compressor": bool}``.  uint8 4-D specs are camera frames (a frame codec, one frame a chunk).

    Raises: the errors of :func:`normalize_array_spec`; ValueError for an empty or invalid key.
    """

    zarr_path: Path
    array_specs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zarr_path", Path(os.path.expanduser(os.fspath(self.zarr_path))))
        specs = {}
        for key, spec in self.array_specs.items():
            check_key(key)
            specs[key] = normalize_array_spec(key, spec)
        if not specs:
            raise ValueError("a DatasetSchema needs at least one array spec")
        object.__setattr__(self, "array_specs", specs)

    def get_zarr_array_specs(self) -> dict[str, dict[str, Any]]:
        """A copy of the normalised specs (key → spec dict)."""
        return {k: dict(v) for k, v in self.array_specs.items()}

    def validate_episode(self, index: int, episode: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check one episode against the specs; returns key → ndarray.

        Raises:
            ValueError: a spec key missing, an extra key, lengths differing, a dtype or trailing
                shape differing from the spec — the message names the episode index and the key.
        """
        if not isinstance(episode, Mapping):
            raise ValueError(f"episode {index}: expected a dict of arrays, got {type(episode).__name__}")
        missing = sorted(set(self.array_specs) - set(episode))
        extra = sorted(set(episode) - set(self.array_specs))
        if missing or extra:
            raise ValueError(f"episode {index}: keys differ from the schema: missing {missing}, extra {extra}")
        out, length, first = {}, None, None
        for key, spec in self.array_specs.items():
            arr = np.asarray(episode[key])
            if arr.ndim == 0:
                raise ValueError(f"episode {index}, key {key!r}: a 0-d value has no time axis")
            if spec["dtype"] == object:
                if arr.dtype.kind not in "OUT" or (arr.dtype == object and not all(isinstance(v, str) for v in arr.flat)):
                    raise ValueError(f"episode {index}, key {key!r}: the schema declares text; got {arr.dtype} values")
                arr = arr.astype(object)
            elif arr.dtype != spec["dtype"]:
                raise ValueError(f"episode {index}, key {key!r}: dtype {arr.dtype} differs from the schema's "
                                 f"{spec['dtype']}")
            if tuple(arr.shape[1:]) != tuple(spec["shape"][1:]):
                raise ValueError(f"episode {index}, key {key!r}: step shape {arr.shape[1:]} differs from the "
                                 f"schema's {tuple(spec['shape'][1:])}")
            if length is None:
                length, first = arr.shape[0], key
            elif arr.shape[0] != length:
                raise ValueError(f"episode {index}: {first!r} has {length} steps but {key!r} has {arr.shape[0]}")
            out[key] = arr
        if length == 0:
            raise ValueError(f"episode {index}: zero-length episodes are rejected")
        return out


def as_dataset_schema(schema: Any) -> DatasetSchema:
    """``schema`` as a :class:`DatasetSchema`: one as it is, or any seed-style schema object — one with
    ``zarr_path`` (``str`` or ``os.PathLike``) and ``get_zarr_array_specs()`` returning key →
    ``{shape, chunks, dtype, needs_compressor}`` — checked and normalised from its specs.

    Raises:
        TypeError: ``schema`` has no ``zarr_path`` or no ``get_zarr_array_specs()``, or a path that is
            neither ``str`` nor path-like.
        KeyError / ValueError / TypeError: a bad spec (see :func:`normalize_array_spec`).
    """
    if isinstance(schema, DatasetSchema):
        return schema
    path = getattr(schema, "zarr_path", None)
    specs = getattr(schema, "get_zarr_array_specs", None)
    if path is None or not callable(specs):
        raise TypeError(f"{type(schema).__name__} is no dataset schema: it needs a `zarr_path` and a "
                        "`get_zarr_array_specs()` method (or pass a replaybuf_core.layout.schema.DatasetSchema)")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"schema.zarr_path must be a str or path, got {type(path).__name__}")
    return DatasetSchema(Path(os.fspath(path)), dict(specs()))
