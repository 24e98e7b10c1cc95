"""Parquet row columns of LeRobot datasets as NumPy arrays, exactly (pyarrow; no ``datasets``).

A scalar column (``timestamp``, ``frame_index``, ``next.reward``...) becomes ``(T,)`` of its arrow
type; a list column (``observation.state``: ``list<double>`` or ``fixed_size_list<float>[7]``,
nested lists for multi-dimensional features) becomes ``(T,) + step shape``, every row of one length;
strings become object arrays of ``str``; ``image`` features (structs of PNG/JPEG ``bytes`` and
``path``) stay encoded here and are decoded by :func:`decode_image`.
"""

from __future__ import annotations

import io

import numpy as np


def _pa():
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def arrow_numpy(arr) -> np.ndarray:
    """An arrow ``Array`` or ``ChunkedArray`` as a 1-D NumPy array (read-only when it is a view).

    Integers and floats without nulls are viewed from their data buffer, booleans unpacked from
    their bits: pyarrow's ``to_numpy`` goes through its pandas conversion layer, whose first use
    imports pandas (~0.4 s of an import's start).  Anything else goes through ``to_numpy``."""
    pa, _ = _pa()
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    t, n = arr.type, len(arr)
    if arr.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        dtype = np.dtype(t.to_pandas_dtype())
        if n == 0:
            return np.empty(0, dtype)
        return np.frombuffer(arr.buffers()[1], dtype=dtype, count=n, offset=arr.offset * dtype.itemsize)
    if arr.null_count == 0 and pa.types.is_boolean(t):
        if n == 0:
            return np.empty(0, bool)
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[arr.offset:arr.offset + n].astype(bool)
    return arr.to_numpy(zero_copy_only=False)


def arrow_step(type_, feature_shape) -> tuple[np.dtype, tuple[int, ...], bool]:
    """``(dtype, step shape, is_image)`` of a column of arrow type ``type_`` (the step shape of
    variable-length lists comes from the feature's declared ``shape``).

    Raises:
        ValueError: a type with no NumPy counterpart, or lists nested deeper than the declared shape.
    """
    pa, _ = _pa()
    shape: list[int] = []
    depth = 0
    t = type_
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if pa.types.is_fixed_size_list(t):
            shape.append(int(t.list_size))
        else:
            declared = list(feature_shape or [])
            if depth >= len(declared):
                raise ValueError(f"a list column nested deeper than its declared shape {feature_shape}")
            shape.append(int(declared[depth]))
        depth += 1
        t = t.value_type
    if pa.types.is_struct(t) and t.get_field_index("bytes") >= 0 and not shape:
        return np.dtype(object), (), True
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.dtype(object), tuple(shape), False
    try:
        dtype = np.dtype(t.to_pandas_dtype())
    except (NotImplementedError, TypeError) as exc:
        raise ValueError(f"arrow type {type_} has no NumPy counterpart") from exc
    if dtype.kind not in "biuf":
        raise ValueError(f"arrow type {type_} is not numbers, booleans or text")
    return dtype, tuple(shape), False


def declares_shape(type_) -> bool:
    """True when a column of arrow type ``type_`` takes (part of) its step shape from the feature's
    declared ``shape`` in ``meta/info.json``: a variable-length list at some level (a fixed-size list
    carries its own length)."""
    pa, _ = _pa()
    t = type_
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if not pa.types.is_fixed_size_list(t):
            return True
        t = t.value_type
    return False


def column_array(col, name: str, where: str) -> np.ndarray:
    """The chunked arrow column ``col`` as ``(T,) + step shape`` (see the module docstring).

    Raises:
        ValueError: a null value, or list rows of different lengths (naming ``name``, ``where`` and the row).
    """
    pa, pc = _pa()
    arr = pa.concat_arrays(col.chunks) if col.num_chunks != 1 else col.chunk(0)
    n = len(arr)
    if arr.null_count:
        row = int(np.flatnonzero(arrow_numpy(arr.is_null()))[0])
        raise ValueError(f"{where}: column {name!r} is null at row {row}")
    shape: list[int] = []
    values = arr
    while pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or \
            pa.types.is_fixed_size_list(values.type):
        lengths = arrow_numpy(pc.list_value_length(values))
        if len(lengths) and (lengths != lengths[0]).any():
            row = int(np.flatnonzero(lengths != lengths[0])[0])
            raise ValueError(f"{where}: column {name!r} holds lists of different lengths ({int(lengths[0])} "
                             f"and {int(lengths[row])}, flat row {row})")
        shape.append(int(lengths[0]) if len(lengths) else 0)
        values = values.flatten()
        if values.null_count:
            raise ValueError(f"{where}: column {name!r} holds a null element")
    t = values.type
    if pa.types.is_struct(t):
        out = np.empty(len(values), dtype=object)
        out[:] = values.field("bytes").to_pylist()
        return out
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out = np.empty(len(values), dtype=object)
        out[:] = values.to_pylist()
    else:
        out = arrow_numpy(values)
    return out.reshape((n, *shape)) if shape else out.reshape(n)


def decode_image(data: bytes, name: str, where: str) -> np.ndarray:
    """One encoded image cell (PNG or JPEG bytes) as ``(H, W, C)`` (uint8; 16-bit PNG: uint16) via
    Pillow.  Raises ValueError naming the column when it does not decode."""
    from PIL import Image

    if data is None:
        raise ValueError(f"{where}: image column {name!r} holds no bytes (a path-only image)")
    try:
        with Image.open(io.BytesIO(data)) as im:
            a = np.asarray(im)
    except Exception as exc:
        raise ValueError(f"{where}: image column {name!r} does not decode ({exc})") from exc
    if a.dtype == np.int32 or a.dtype == ">u2":
        a = a.astype(np.uint16)
    return a[..., None] if a.ndim == 2 else a
