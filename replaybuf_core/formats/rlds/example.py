"""``tf.train.Example`` without TensorFlow: the message classes built at run time with ``protobuf``
(the ``rlds`` extra), the values of a feature as NumPy arrays, and a wire-format scan that counts each
feature's values without parsing them (the episode index).

The messages are TensorFlow's (``tensorflow/core/example/{example,feature}.proto``)::

    message BytesList { repeated bytes value = 1; }
    message FloatList { repeated float value = 1 [packed = true]; }
    message Int64List { repeated int64 value = 1 [packed = true]; }
    message Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    message Features  { map<string, Feature> feature = 1; }
    message Example   { Features features = 1; }

built from a ``FileDescriptorProto`` in a private descriptor pool (so TensorFlow's own, if it is
imported in the same process, never clashes with them).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["require_protobuf", "example_class", "messages", "parse_example", "feature_values", "scan_counts", "KINDS"]

#: The oneof ``kind`` of a Feature by its field number.
KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


def require_protobuf():
    """``google.protobuf``, or ImportError saying how to install it."""
    try:
        import google.protobuf  # noqa: F401
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as exc:
        raise ImportError("reading RLDS / TFDS datasets needs protobuf: pip install 'replaybuf[rlds]' "
                          "(or pip install protobuf); TensorFlow is not needed") from exc
    return descriptor_pb2, descriptor_pool, message_factory


def example_class() -> Any:
    """The ``tensorflow.Example`` message class (protobuf).  Raises ImportError (protobuf missing)."""
    return messages()[0]


@functools.lru_cache(maxsize=None)
def messages() -> tuple[Any, Any]:
    """The ``tensorflow.Example`` and ``tensorflow.Feature`` message classes (protobuf), built once per
    process.  Raises ImportError (protobuf missing, naming the extra)."""
    descriptor_pb2, descriptor_pool, message_factory = require_protobuf()
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="replaybuf/tf_example.proto", package="tensorflow", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, int, str | None, int | None]):
        m = f.message_type.add(name=name)
        for fname, number, label, ftype, type_name, oneof in fields:
            fd = m.field.add(name=fname, number=number, label=label, type=ftype)
            if type_name:
                fd.type_name = type_name
            if oneof is not None:
                fd.oneof_index = oneof
        return m

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    message("BytesList", ("value", 1, rep, F.TYPE_BYTES, None, None))
    message("FloatList", ("value", 1, rep, F.TYPE_FLOAT, None, None)).field[0].options.packed = True
    message("Int64List", ("value", 1, rep, F.TYPE_INT64, None, None)).field[0].options.packed = True
    feature = message("Feature", ("bytes_list", 1, opt, F.TYPE_MESSAGE, ".tensorflow.BytesList", 0),
                      ("float_list", 2, opt, F.TYPE_MESSAGE, ".tensorflow.FloatList", 0),
                      ("int64_list", 3, opt, F.TYPE_MESSAGE, ".tensorflow.Int64List", 0))
    feature.oneof_decl.add(name="kind")
    features = message("Features", ("feature", 1, rep, F.TYPE_MESSAGE, ".tensorflow.Features.FeatureEntry", None))
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=opt, type=F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=opt, type=F.TYPE_MESSAGE, type_name=".tensorflow.Feature")
    message("Example", ("features", 1, opt, F.TYPE_MESSAGE, ".tensorflow.Features", None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{n}"))
                 for n in ("Example", "Feature"))


def parse_example(data: bytes, where: str) -> Any:
    """``data`` parsed as a ``tf.train.Example``; its ``features.feature`` map is key → Feature.

    Raises ValueError naming ``where`` when the bytes are not an Example."""
    cls = example_class()
    try:
        return cls.FromString(data)
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"{where}: not a tf.train.Example ({type(exc).__name__}: {exc})") from None


def feature_values(feature: Any) -> tuple[str | None, Any]:
    """``(kind, values)`` of a ``Feature``: ``"bytes_list"`` → list of bytes, ``"float_list"`` →
    float32 array, ``"int64_list"`` → int64 array; ``(None, None)`` for a Feature with no kind set."""
    kind = feature.WhichOneof("kind")
    if kind is None:
        return None, None
    lst = getattr(feature, kind)
    if kind == "bytes_list":
        return kind, list(lst.value)
    if kind == "float_list":
        n = len(lst.value)
        if not n:
            return kind, np.zeros(0, np.float32)
        raw = lst.SerializeToString()  # the packed payload: n little-endian float32 after tag and length
        return kind, np.frombuffer(raw, dtype="<f4", count=n, offset=len(raw) - 4 * n).astype(np.float32)
    return kind, np.fromiter(lst.value, dtype=np.int64, count=len(lst.value))


# ------------------------------------------------------------------------------------ the wire scan
class ScanError(ValueError):
    """Bytes that are not a well-formed Example (the scan's view)."""


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ScanError("a varint runs past the end of its message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ScanError("a varint longer than 10 bytes")


def _skip(buf: memoryview, pos: int, end: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    elif wire == 5:
        pos += 4
    else:
        raise ScanError(f"wire type {wire} is not used by Example")
    if pos > end:
        raise ScanError("a field runs past the end of its message")
    return pos


def _fields(buf: memoryview, pos: int, end: int):
    """``(field number, wire type, start, stop)`` of each field of the message in ``buf[pos:end]``
    (for wire type 2 ``start:stop`` is the payload; else the value's bytes)."""
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 2:
            n, start = _varint(buf, pos, end)
            pos = start + n
            if pos > end:
                raise ScanError("a field runs past the end of its message")
            yield number, wire, start, pos
        else:
            start = pos
            pos = _skip(buf, pos, end, wire)
            yield number, wire, start, pos


def _count_values(buf: memoryview, kind: int, start: int, stop: int) -> int:
    """Values in one BytesList / FloatList / Int64List message (packed or not)."""
    n = 0
    for number, wire, a, b in _fields(buf, start, stop):
        if number != 1:
            continue
        if kind == 1:  # bytes: one field a value
            n += 1
        elif kind == 2:
            if wire == 2:
                if (b - a) % 4:
                    raise ScanError("a packed float list whose length is not a multiple of 4")
                n += (b - a) // 4
            elif wire == 5:
                n += 1
        else:
            if wire == 2:  # packed varints: one byte under 0x80 ends each
                n += int(np.count_nonzero(np.frombuffer(buf[a:b], dtype=np.uint8) < 0x80))
            elif wire == 0:
                n += 1
    return n


def scan_counts(data: bytes | memoryview) -> dict[str, tuple[str | None, int, int, int]]:
    """Each feature of a serialized Example as ``key → (kind, number of values, start, stop)`` without
    parsing the values (a list's bytes are not copied: varints are counted, floats are 4 bytes each,
    bytes fields are stepped over); ``data[start:stop]`` is the serialized ``Feature`` (``-1, -1`` for
    a map entry whose value is given more than once, to be merged: parse the whole Example then).
    The kinds and counts are protobuf's (a later map entry of a key replaces an earlier one; a list
    message given twice in one Feature is merged).

    Raises ScanError (a ValueError) for bytes that are not a well-formed Example."""
    buf = memoryview(data).cast("B")
    out: dict[str, tuple[str | None, int]] = {}
    for number, wire, a, b in _fields(buf, 0, len(buf)):
        if number != 1 or wire != 2:
            continue
        for n2, w2, c, d in _fields(buf, a, b):  # Features: map entries
            if n2 != 1 or w2 != 2:
                continue
            key, kind, count, span, values = "", None, 0, (c, c), 0
            for n3, w3, e, g in _fields(buf, c, d):
                if n3 == 1 and w3 == 2:
                    try:
                        key = bytes(buf[e:g]).decode("utf-8")
                    except UnicodeDecodeError:
                        raise ScanError("a feature name is not UTF-8") from None
                elif n3 == 2 and w3 == 2:  # Feature: the last oneof field set wins; the same one merges
                    values += 1
                    span = (e, g)
                    for n4, w4, h, k in _fields(buf, e, g):
                        if n4 in KINDS and w4 == 2:
                            if kind != KINDS[n4]:
                                kind, count = KINDS[n4], 0
                            count += _count_values(buf, n4, h, k)
            if values > 1:  # the Feature is spread over several fields of the entry: no one span
                span = (-1, -1)
            out[key] = (kind, count, *span)
    return out
