"""Synchronous chunk encoders and decoders built from codec names and configurations.

The fast chunk reader and writer turn an array's codec chain — the ``codecs`` entries of its
``zarr.json``, ``{"name": ..., "configuration": {...}}`` — into plain functions, using numcodecs
(Blosc, Zstd, GZip), google-crc32c and replaybuf's frame codecs (WebP, JPEG XL, JPEG).  A chain holding anything else
(array→array codecs, unknown names or settings) gives None and the caller takes zarr-python's path.

Sources: Zarr v3 core spec ``bytes`` codec (``endian``); codec specs ``blosc`` (``cname``,
``clevel``, ``shuffle`` as ``noshuffle``/``shuffle``/``bitshuffle``, ``typesize``, ``blocksize``),
``zstd`` (``level``, ``checksum``), ``gzip`` (``level``) and ``crc32c`` (a little-endian CRC-32C of
the bytes, appended); the v2 spec for ``.zarray`` compressors (numcodecs configurations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numcodecs
import numpy as np

_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
Decoder = Callable[[Any], Any]


def crc32c(data: Any) -> int:
    """CRC-32C (Castagnoli) of ``data`` (bytes-like), as the zarr ``crc32c`` codec computes it."""
    import google_crc32c

    return google_crc32c.value(bytes(data))


def blosc_decompress(data: Any, dest: Any = None) -> Any:
    """Blosc-decompress (into ``dest`` when given) after checking the frame's own size field (bytes
    12..16 of the Blosc header, the compressed size): a truncated chunk would otherwise decode to wrong
    values silently.

    Raises:
        ValueError: the chunk is shorter or longer than its header says.
    """
    view = memoryview(data)
    if len(view) < 16 or int.from_bytes(view[12:16], "little") != len(view):
        declared = int.from_bytes(view[12:16], "little") if len(view) >= 16 else "?"
        raise ValueError(f"truncated or damaged Blosc chunk: {len(view)} bytes stored, header says {declared}")
    if dest is not None:
        numcodecs.blosc.decompress(data, dest)
        return dest
    return numcodecs.blosc.decompress(data)


def _crc32c_strip(data: Any) -> Any:
    view = memoryview(data)
    if len(view) < 4 or crc32c(view[:-4]) != int.from_bytes(view[-4:], "little"):
        raise ValueError("the crc32c checksum does not match (damaged chunk)")
    return view[:-4]


def bytes_decoder(entry: dict[str, Any]) -> Decoder | None:
    """bytes → bytes for one compressor entry (``blosc``, ``zstd``, ``gzip``, ``crc32c``, or a v2
    ``numcodecs`` configuration), or None when unknown."""
    name = entry["name"]
    if name == "blosc":
        return blosc_decompress
    if name == "zstd":
        return numcodecs.Zstd().decode
    if name == "gzip":
        return numcodecs.GZip().decode
    if name == "crc32c":
        return _crc32c_strip
    if name == "numcodecs":  # a zarr v2 compressor
        conf = entry["configuration"]
        if conf.get("id") == "blosc":
            return blosc_decompress
        try:
            return numcodecs.get_codec(dict(conf)).decode
        except (ValueError, KeyError, TypeError):
            return None
    return None


def bytes_encoder(entry: dict[str, Any], typesize: int) -> Callable[[Any], bytes] | None:
    """bytes → bytes for one v3 compressor entry, or None when unknown or oddly configured.
    ``typesize`` (bytes per element) is used when a Blosc entry does not give its own."""
    name, conf = entry["name"], entry["configuration"]
    try:
        if name == "blosc":
            shuffle = _BLOSC_SHUFFLE[conf.get("shuffle", "bitshuffle" if typesize == 1 else "shuffle")]
            cname = str(conf.get("cname", "zstd")).encode()
            clevel = int(conf.get("clevel", 5))
            blocksize = int(conf.get("blocksize", 0))
            size = int(conf.get("typesize", typesize))
            view = np.dtype(f"u{size}") if size in (1, 2, 4, 8) else np.dtype(np.uint8)

            def blosc(b: Any) -> bytes:
                arr = np.frombuffer(b, dtype=np.uint8)
                if len(arr) % view.itemsize == 0:
                    arr = arr.view(view)  # Blosc's typesize is the item size of what it is handed
                return numcodecs.blosc.compress(arr, cname, clevel, shuffle, blocksize)

            return blosc
        if name == "zstd":
            return numcodecs.Zstd(level=int(conf.get("level", 0)), checksum=bool(conf.get("checksum", False))).encode
        if name == "gzip":
            return numcodecs.GZip(level=int(conf.get("level", 5))).encode
        if name == "crc32c":
            return lambda b: bytes(b) + crc32c(b).to_bytes(4, "little")
    except (KeyError, ValueError, TypeError):
        return None
    return None


def _serializer_order(entry: dict[str, Any], dtype: np.dtype) -> np.dtype | None:
    """The stored dtype of a ``bytes`` serializer (byte order from ``endian``), or None."""
    if dtype.kind not in "biufc":
        return None
    endian = entry["configuration"].get("endian", "little")
    if endian not in ("little", "big"):
        return None
    return dtype.newbyteorder("<" if endian == "little" else ">") if dtype.itemsize > 1 else dtype


def frame_codec(entry: dict[str, Any]) -> Any:
    """The replaybuf frame codec of a serializer entry, or None for any other serializer (or a
    frame codec entry with unknown settings)."""
    from .codecs import FRAME_CODECS

    cls = FRAME_CODECS.get(entry.get("name"))
    if cls is None:
        return None
    try:
        return cls.from_dict(entry)
    except (TypeError, ValueError):
        return None


def array_decoder(codecs: tuple[dict[str, Any], ...], chunk_shape: tuple[int, ...],
                  dtype: np.dtype) -> Callable[[Any], np.ndarray] | None:
    """bytes → ndarray of ``chunk_shape`` and ``dtype`` for a (serializer, *compressors) chain, or
    None when any codec is not known (the caller falls back to zarr-python)."""
    from .codecs.webp import CODEC_NAME as WEBP

    if not codecs:
        return None
    serializer, compressors = codecs[0], codecs[1:]
    frames = frame_codec(serializer)
    decoders = [bytes_decoder(c) for c in compressors]
    if any(d is None for d in decoders):
        return None
    decoders.reverse()  # decode runs the chain backwards
    if serializer["name"] == "bytes":
        stored = _serializer_order(serializer, dtype)
        if stored is None:
            return None
        if decoders == [blosc_decompress]:  # the common case: decompress straight into the array
            def decode_blosc(data: Any) -> np.ndarray:
                out = np.empty(chunk_shape, dtype=stored)
                blosc_decompress(data, out)
                return out.astype(dtype, copy=False)

            return decode_blosc

        def to_array(b: Any) -> np.ndarray:
            return np.frombuffer(b, dtype=stored).reshape(chunk_shape).astype(dtype, copy=False)
    elif frames is not None:
        if serializer["name"] == WEBP and not decoders and len(chunk_shape) == 4 and chunk_shape[3] in (3, 4):
            return _webp_frame_decoder(frames, chunk_shape)  # colour WebP frames: the short path

        def to_array(b: Any) -> np.ndarray:
            return frames.decode_frame(bytes(b), chunk_shape)
    else:
        return None

    def decode(data: Any) -> np.ndarray:
        for d in decoders:
            data = d(data)
        return to_array(data)

    return decode


def array_row_decoder(codecs: tuple[dict[str, Any], ...], chunk_shape: tuple[int, ...],
                      dtype: np.dtype) -> Callable[[Any, Sequence[int]], np.ndarray] | None:
    """``(bytes, rows) → ndarray (len(rows), *chunk_shape[1:])`` — only some rows of a chunk — for a
    chain whose serializer is a frame codec that decodes rows on their own for less than the whole
    chunk (the video codec: GOPs decoded up to the last frame wanted), with no compressor after it;
    else None (decode whole chunks)."""
    if len(codecs) != 1 or np.dtype(dtype) != np.uint8:
        return None
    frames = frame_codec(codecs[0])
    decode_rows = getattr(frames, "decode_rows", None)
    if decode_rows is None or getattr(frames, "frames_per_chunk", 1) <= 1:
        return None
    shape = tuple(int(s) for s in chunk_shape)

    def decode(data: Any, rows: Sequence[int]) -> np.ndarray:
        return decode_rows(bytes(data), shape, rows)

    return decode


def array_resized_decoder(codecs: tuple[dict[str, Any], ...], chunk_shape: tuple[int, ...],
                          dtype: np.dtype) -> Callable[[Any, Sequence[int], Any], np.ndarray] | None:
    """``(bytes, rows, fr) → ndarray (len(rows), fr.height, fr.width[, C])`` — rows of a chunk cropped
    and resized as a :class:`~replaybuf_core.layout.frame_resize.FrameResize` says, each frame codec
    its cheapest way (``decode_resized``) — for a chain whose serializer is a frame codec with no
    compressor after it; else None."""
    if len(codecs) != 1 or np.dtype(dtype) != np.uint8:
        return None
    frames = frame_codec(codecs[0])
    if frames is None:
        return None
    shape = tuple(int(s) for s in chunk_shape)

    def decode(data: Any, rows: Sequence[int], fr: Any) -> np.ndarray:
        return frames.decode_resized(bytes(data), shape, list(rows), fr)

    return decode


def _webp_frame_decoder(codec: Any, chunk_shape: tuple[int, ...]) -> Callable[[Any], np.ndarray]:
    """bytes → one RGB(A) frame chunk ``(1, H, W, C)``: what ``WebPCodec.decode_frame`` does for
    colour frames, with the per-call argument handling done once."""
    import imagecodecs

    shape = tuple(int(s) for s in chunk_shape)
    hw, alpha = shape[1:3], shape[3] == 4

    def decode(b: Any) -> np.ndarray:
        img = imagecodecs.webp_decode(b, hasalpha=alpha)
        if img.shape[:2] != hw or img.ndim != 3 or img.shape[2] != shape[3]:
            return codec.decode_frame(bytes(b), shape)  # raises the codec's error
        return img.reshape(shape)

    return decode


def array_encoder(codecs: tuple[dict[str, Any], ...], chunk_shape: tuple[int, ...],
                  dtype: np.dtype) -> Callable[[np.ndarray], bytes] | None:
    """ndarray (``chunk_shape``) → bytes for a v3 (serializer, *compressors) chain, or None."""
    if not codecs:
        return None
    serializer, compressors = codecs[0], codecs[1:]
    encoders = [bytes_encoder(c, dtype.itemsize) for c in compressors]
    if any(e is None for e in encoders):
        return None
    if serializer["name"] == "bytes":
        stored = _serializer_order(serializer, dtype)
        if stored is None:
            return None

        def to_bytes(chunk: np.ndarray) -> bytes:
            return np.ascontiguousarray(chunk, dtype=stored).tobytes()
    elif (frames := frame_codec(serializer)) is not None:
        to_bytes = frames.encode_frame
    else:
        return None

    def encode(chunk: np.ndarray) -> bytes:
        data = to_bytes(chunk)
        for e in encoders:
            data = e(data)
        return bytes(data)

    return encode

