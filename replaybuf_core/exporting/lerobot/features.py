"""Which store keys become which LeRobot features, and how a feature's rows become a parquet column.

LeRobot v3.0's features (``meta/info.json``, https://huggingface.co/docs/lerobot/lerobot-dataset-v3):
each has ``dtype`` (``"video"``, ``"image"``, or a numpy dtype name such as ``"float32"``,
``"int64"``, ``"bool"``), ``shape`` (a scalar is ``[1]``) and ``names``; video features carry
``info`` (``video.height``, ``video.width``, ``video.codec``, ``video.pix_fmt``, ``video.fps``,
``video.channels``, ``video.is_depth_map``, ``has_audio``).  In the data parquet a ``[1]`` feature is
a plain column, a vector a fixed-size list and a matrix a list of fixed-size lists (the Arrow types
of Hugging Face ``datasets``' ``Value``, ``Sequence(length=n)`` and ``Array2D``).  Every dataset ends
with the five bookkeeping columns ``timestamp`` (float32 seconds), ``frame_index``,
``episode_index``, ``index`` and ``task_index`` (int64), which the export writes itself.

A camera is a key stored as uint8 ``(H, W, 3)`` steps (also one a diffusion-policy import reads as
float32 0..255): it becomes a video feature, its frames read as stored (uint8) — or, asked for, an
``image`` feature: PNG bytes in the parquet (a ``{bytes, path}`` struct column, Hugging Face
``datasets``' ``Image``), lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybuf_core.export_format import ExportPlan

__all__ = ["BOOKKEEPING", "Column", "arrow_column", "bookkeeping_features", "column_values", "plan_columns",
           "png_column"]

BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclass
class Column:
    """One exported feature: store ``key``, exported ``name``, ``kind`` (``"video"``, ``"image"``
    or ``"value"``), the step ``shape`` and ``dtype`` written, and its info.json ``feature``."""

    key: str
    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: np.dtype
    feature: dict[str, Any]

    @property
    def video(self) -> bool:
        return self.kind == "video"

    @property
    def camera(self) -> bool:
        return self.kind in ("video", "image")


def bookkeeping_features() -> dict[str, dict[str, Any]]:
    """info.json's entries of the five bookkeeping columns."""
    return {n: {"dtype": "float32" if n == "timestamp" else "int64", "shape": [1], "names": None}
            for n in BOOKKEEPING}


def plan_columns(plan: ExportPlan, fps: float, codec_for, images: bool = False) -> list[Column]:
    """The exported features of ``plan`` (its keys but the bookkeeping ones): cameras first, each
    group in a LeRobot import's feature order, then the store's.  ``codec_for(key)`` gives a camera's
    info.json ``video.codec``; ``images`` makes cameras PNG ``image`` features instead of videos.

    Raises ValueError naming the key: text or object values, a uint8 image that is not RGB (gray,
    RGBA: LeRobot's videos are RGB), a camera with an odd side (yuv420p needs even sides), a name
    holding ``/`` (LeRobot's episode columns are ``videos/<name>/...``).
    """
    kept = plan.data_attrs().get("key_attrs") or {}
    cameras, values = [], []
    for key, name in plan.names.items():
        if name in BOOKKEEPING:
            if name != key:
                raise ValueError(f"LeRobot export: {key!r} cannot be renamed to {name!r}, a column LeRobot's "
                                 "bookkeeping defines (the export writes it)")
            continue
        if "/" in name or not name:
            raise ValueError(f"LeRobot export: {name!r} (key {key!r}) cannot be a LeRobot feature name (no '/')")
        shape, dtype = plan.step_spec(key)
        stored = np.dtype(plan.rb.store.dtype("data", key))
        source = kept.get(key) if name == key and isinstance(kept.get(key), dict) else {}
        if len(shape) == 3 and stored == np.uint8:
            h, w, c = shape
            if c != 3:
                raise ValueError(f"LeRobot export: camera {key!r} has {c} channel(s); LeRobot's videos are RGB — "
                                 f"leave it out with --skip-key {key}")
            names = ["height", "width", "channel"]
            if images:
                cameras.append(Column(key, name, "image", shape, np.dtype(np.uint8),
                                      {"dtype": "image", "shape": [h, w, 3], "names": names}))
                continue
            if h % 2 or w % 2:
                raise ValueError(f"LeRobot export: camera {key!r} is {w}x{h}; yuv420p video needs even sides "
                                 "(or export it as PNG images: --lerobot-images)")
            info = {"video.height": h, "video.width": w, "video.codec": codec_for(key), "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False}
            feature = {"dtype": "video", "shape": [h, w, 3], "names": names, "info": info}
            cameras.append(Column(key, name, "video", shape, np.dtype(np.uint8), feature))
            continue
        if dtype.kind not in "biuf":
            raise ValueError(f"LeRobot export: key {key!r} holds {dtype} values, which LeRobot's numeric features "
                             f"cannot hold; leave it out with --skip-key {key}")
        if len(shape) > 2:
            raise ValueError(f"LeRobot export: key {key!r} has steps of shape {shape}; LeRobot's non-video features "
                             "have at most 2 dimensions (a camera is stored uint8 (H, W, 3): convert it, or leave "
                             f"it out with --skip-key {key})")
        lr_shape = list(shape) if shape and shape != (1,) else [1]
        names = source.get("names") if list(source.get("shape") or []) == lr_shape else None
        feature = {"dtype": dtype.name, "shape": lr_shape, "names": names}
        values.append(Column(key, name, "value", shape, dtype, feature))
    # a LeRobot import's feature order (its key_attrs), then the store's: cameras first, as LeRobot lists them
    position = {k: i for i, k in enumerate(kept)}
    def order(c: Column): return (position.get(c.key, len(position)), list(plan.names).index(c.key))
    return sorted(cameras, key=order) + sorted(values, key=order)


def arrow_column(values: np.ndarray):
    """The Arrow array of ``(T, *step)`` values: plain for scalar steps (and ``(1,)``), a fixed-size
    list for vectors, a list of fixed-size lists for matrices."""
    import pyarrow as pa

    t = len(values)
    step = values.shape[1:]
    if not step or step == (1,):
        return pa.array(values.reshape(t))
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    if len(step) == 1:
        return pa.FixedSizeListArray.from_arrays(flat, step[0])
    inner = pa.FixedSizeListArray.from_arrays(flat, step[1])
    return pa.ListArray.from_arrays(pa.array(np.arange(0, t * step[0] + 1, step[0], dtype=np.int32)), inner)


def png_column(frames: np.ndarray):
    """The parquet column of ``(T, H, W, 3)`` uint8 frames as LeRobot's ``image`` features hold them:
    ``{bytes: PNG, path: null}`` structs (PNG by Pillow)."""
    import io

    import pyarrow as pa
    from PIL import Image

    out = []
    for frame in frames:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(frame)).save(buf, format="PNG", compress_level=1)
        out.append({"bytes": buf.getvalue(), "path": None})
    return pa.array(out, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def column_values(column, step: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A parquet column read back with pyarrow as ``(T, *step)`` values of ``dtype`` (the inverse of
    :func:`arrow_column`, through Arrow's own flattening)."""
    import pyarrow as pa

    t = len(column)
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        arr = arr.flatten()
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype).reshape((t, *step))
