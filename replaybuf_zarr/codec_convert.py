"""Translate compressor specs into zarr codecs.

replaybuf_core speaks numcodecs (``numcodecs.Blosc`` presets, no zarr import); zarr v3 arrays need
zarr v3 codecs.  :func:`to_zarr_codecs` maps a numcodecs codec, a zarr v3 codec or a JSON dict onto
the ``(serializer, compressors)`` pair ``zarr.create_array`` takes.
"""

from __future__ import annotations

from typing import Any

import numcodecs
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

_SHUFFLE_NAMES = {
    numcodecs.Blosc.NOSHUFFLE: "noshuffle",
    numcodecs.Blosc.SHUFFLE: "shuffle",
    numcodecs.Blosc.BITSHUFFLE: "bitshuffle",
}


def to_zarr_codecs(codec: Any, zarr_format: int = 3) -> tuple[Any, Any]:
    """Return ``(serializer, compressors)`` for ``zarr.create_array`` from one codec spec.

    Args:
        codec: ``None`` (uncompressed), a numcodecs codec (``Blosc``, ``Zstd``, ``GZip`` map to
            zarr's own codecs; others go through ``zarr.codecs.numcodecs``), a zarr v3 bytes→bytes codec
            (a compressor), a zarr v3 array→bytes codec (a serializer such as WebP), or a dict
            ``{"name": ..., "configuration": {...}}``.
        zarr_format: 2 or 3; for 2 a numcodecs codec passes through unchanged.

    Returns:
        ``("auto", compressors)`` for a compressor, ``(serializer, None)`` for a serializer.

    Raises:
        TypeError: ``codec`` is none of the above, or a numcodecs codec has no zarr v3 form.
    """
    if codec is None:
        return "auto", None
    if zarr_format == 2:
        if isinstance(codec, numcodecs.abc.Codec):
            return "auto", codec
        raise TypeError(f"a zarr v2 array needs a numcodecs compressor, got {codec!r}")
    if isinstance(codec, ArrayBytesCodec):
        return codec, None
    if isinstance(codec, (BytesBytesCodec, ArrayArrayCodec)):
        return "auto", (codec,)
    if isinstance(codec, dict):
        from zarr.registry import get_codec_class

        cls = get_codec_class(codec["name"])
        return to_zarr_codecs(cls.from_dict(codec))
    if isinstance(codec, numcodecs.Blosc):
        shuffle = _SHUFFLE_NAMES.get(codec.shuffle)
        if shuffle is None:  # AUTOSHUFFLE: what numcodecs does for typesize > 1
            shuffle = "shuffle"
        return "auto", (BloscCodec(cname=codec.cname, clevel=codec.clevel, shuffle=shuffle,
                                   blocksize=codec.blocksize),)
    if isinstance(codec, numcodecs.Zstd):
        return "auto", (ZstdCodec(level=codec.level),)
    if isinstance(codec, numcodecs.GZip):
        return "auto", (GzipCodec(level=codec.level),)
    if isinstance(codec, numcodecs.abc.Codec):
        import zarr.codecs.numcodecs as nz3  # zarr's own wrappers (numcodecs.zarr3 is deprecated)

        cls = getattr(nz3, type(codec).__name__, None)
        if cls is None:
            raise TypeError(f"numcodecs codec {codec!r} has no zarr v3 form in zarr.codecs.numcodecs")
        return "auto", (cls(**{k: v for k, v in codec.get_config().items() if k != "id"}),)
    raise TypeError(
        f"cannot use {type(codec).__name__} {codec!r} as a zarr codec: pass a numcodecs codec, a zarr "
        "v3 codec or a codec dict"
    )


def codec_of_array(arr: Any) -> Any:
    """The array's first compressor, else its serializer when that is not plain bytes, else None."""
    comps = tuple(arr.compressors or ())
    if comps:
        return comps[0]
    if arr.metadata.zarr_format == 3:
        from zarr.codecs import BytesCodec

        ser = arr.serializer
        if ser is not None and not isinstance(ser, BytesCodec) and type(ser).__name__ != "VLenUTF8Codec":
            return ser
    return None


def codecs_equal(a: Any, b: Any, zarr_format: int = 3) -> bool:
    """True when two codec specs give the same zarr codecs (e.g. ``numcodecs.Blosc`` vs ``BloscCodec``)."""
    try:
        ca = to_zarr_codecs(a, zarr_format)
        cb = to_zarr_codecs(b, zarr_format)
    except TypeError:
        return a == b

    def norm(pair):
        ser, comps = pair
        return _codec_json(ser), tuple(_codec_json(c) for c in (comps or ()))

    return norm(ca) == norm(cb)


def _codec_json(codec: Any) -> Any:
    """A comparable form of one codec: its ``zarr.json`` entry without ``typesize`` (zarr fills that
    in from the dtype; it is not a choice the user makes).  A Blosc codec not yet bound to an array
    cannot say ``to_dict()`` on some zarr (typesize unset), so it is read from its attributes."""
    def plain(v: Any) -> Any:
        return getattr(v, "value", v)  # enums on zarr 3.1, plain strings on 3.4

    if isinstance(codec, BloscCodec):
        return {"name": "blosc", "configuration": {k: plain(getattr(codec, k)) for k in
                                                   ("cname", "clevel", "shuffle", "blocksize")}}
    if not hasattr(codec, "to_dict"):
        return codec
    entry = codec.to_dict()
    if isinstance(entry, dict) and isinstance(entry.get("configuration"), dict):
        entry = {**entry, "configuration": {k: v for k, v in entry["configuration"].items() if k != "typesize"}}
    return entry
