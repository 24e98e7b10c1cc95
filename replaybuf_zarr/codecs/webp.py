"""WebP array->bytes serializer for Zarr v3 image arrays (one frame per chunk).

The codec stores every chunk of a ``uint8`` image array as one standalone WebP
image.  It is registered with zarr under the name ``"replaybuf.webp"`` both at
import time (``zarr.registry.register_codec``) and through the
``zarr.codecs`` entry point declared in ``pyproject.toml``, so a process that
never imports replaybuf can still open and read WebP arrays with plain
``zarr.open_group`` / ``zarr.open_array``.

Encoding and decoding use ``imagecodecs.webp_encode`` / ``webp_decode``
(libwebp), which release the GIL; the async codec methods run them through
``asyncio.to_thread`` so zarr's concurrent codec pipeline works on several
frames in parallel.

This module deliberately imports nothing else from replaybuf: the entry point
loads it in processes that only have zarr in mind.
"""

from __future__ import annotations

import asyncio
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import imagecodecs
import numpy as np
from zarr.abc.codec import ArrayBytesCodec
from zarr.registry import register_codec

if TYPE_CHECKING:
    from typing import Self

#: zarr-python's own types for these (``ArraySpec``, ``Buffer``, ``ChunkGrid`` ...) live in
#: ``zarr.core`` and move between releases; the codec only uses them through their documented
#: attributes, so they are annotated loosely.
JSON = Any

__all__ = [
    "CODEC_NAME",
    "DEFAULT_LEVEL",
    "DEFAULT_LOSSLESS",
    "LOSSLESS_LEVEL",
    "MAX_FRAME_SIDE",
    "WEBP_MAX_DIMENSION",
    "WebPCodec",
]

#: Name under which the codec is written to ``zarr.json`` and registered in zarr.
CODEC_NAME = "replaybuf.webp"

#: Default WebP quality (0-100).
DEFAULT_LEVEL = 99

#: Default encoding mode of the codec class (lossy, for zarr users who name it themselves);
#: replaybuf's importers and schema-driven creation pass ``lossless=True``.
DEFAULT_LOSSLESS = False

#: The ``level`` replaybuf uses for lossless frames: in lossless mode it is libwebp's effort
#: (the pixels are identical at every level); 90 is close to the smallest output at a modest cost.
LOSSLESS_LEVEL = 90

#: Largest width/height a WebP bitstream can describe (14-bit fields in the
#: VP8/VP8L headers; WebP container specification, "Canvas Width/Height").
WEBP_MAX_DIMENSION = 16383

#: Largest frame side this codec accepts, in pixels.  One less than
#: :data:`WEBP_MAX_DIMENSION` because ``imagecodecs.webp_encode`` checks
#: ``side < 16383`` (strictly) and rejects a 16383-pixel side.
MAX_FRAME_SIDE = WEBP_MAX_DIMENSION - 1

#: Channel counts a chunk may have on its last axis (gray, RGB, RGBA).
_ALLOWED_CHANNELS = (1, 3, 4)

#: libwebp effort ("method", 0=fast .. 6=slowest/smallest).  Pinned here rather
#: than relying on imagecodecs' default so the bytes written do not silently
#: change with an imagecodecs upgrade.
WEBP_METHOD = 4


def _parse_level(level: Any) -> int:
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, numbers.Integral):
        raise TypeError(
            f"WebPCodec level must be an int in 0..100, got {level!r} "
            f"of type {type(level).__name__}"
        )
    level = int(level)
    if not 0 <= level <= 100:
        raise ValueError(f"WebPCodec level must be in 0..100, got {level}")
    return level


def _parse_lossless(lossless: Any) -> bool:
    if not isinstance(lossless, (bool, np.bool_)):
        raise TypeError(
            f"WebPCodec lossless must be a bool, got {lossless!r} "
            f"of type {type(lossless).__name__}"
        )
    return bool(lossless)


def _check_dtype(dtype: Any) -> None:
    """Raise TypeError unless ``dtype`` (a zarr ZDType or numpy dtype) is uint8."""
    native = dtype.to_native_dtype() if hasattr(dtype, "to_native_dtype") else np.dtype(dtype)
    if native != np.dtype(np.uint8):
        raise TypeError(
            f"WebPCodec only stores uint8 images; got dtype {native} "
            f"(convert e.g. float frames with values in 0..255 via .astype(np.uint8))"
        )


def _check_rank(shape: tuple[int, ...], what: str) -> None:
    if len(shape) not in (3, 4):
        raise ValueError(
            f"WebPCodec needs a 3-D (T, H, W) gray or 4-D (T, H, W, C) {what}; "
            f"got {len(shape)}-D shape {tuple(shape)}"
        )


def check_chunk_shape(chunk_shape: tuple[int, ...]) -> None:
    """Check one chunk shape: rank, one frame, channel count, side limit.

    Raises ValueError naming the offending value.
    """
    chunk_shape = tuple(int(s) for s in chunk_shape)
    _check_rank(chunk_shape, "chunk shape")
    if chunk_shape[0] != 1:
        raise ValueError(
            f"WebPCodec stores exactly one frame per chunk: the chunk shape must be "
            f"(1, H, W[, C]) but has {chunk_shape[0]} frames on axis 0 "
            f"(chunk shape {chunk_shape})"
        )
    if len(chunk_shape) == 4 and chunk_shape[3] not in _ALLOWED_CHANNELS:
        raise ValueError(
            f"WebPCodec supports 1 (gray), 3 (RGB) or 4 (RGBA) channels; "
            f"chunk shape {chunk_shape} has {chunk_shape[3]} channels"
        )
    height, width = chunk_shape[1], chunk_shape[2]
    for name, side in (("height", height), ("width", width)):
        if side < 1:
            raise ValueError(f"WebPCodec frame {name} must be >= 1, got {side}")
        if side > MAX_FRAME_SIDE:
            raise ValueError(
                f"WebPCodec frame {name} {side} px exceeds the limit of {MAX_FRAME_SIDE} px "
                f"(WebP bitstreams describe at most {WEBP_MAX_DIMENSION} px per side and "
                f"imagecodecs' encoder only accepts sides < {WEBP_MAX_DIMENSION}); "
                f"chunk shape {chunk_shape}"
            )


def _regular_chunk_shape(chunk_grid: Any) -> tuple[int, ...]:
    """The chunk shape of a regular chunk grid, from its ``zarr.json`` form
    ``{"name": "regular", "configuration": {"chunk_shape": [...]}}`` (Zarr v3 core spec).

    Raises TypeError for any other grid (e.g. zarr 3.4's rectilinear grids).
    """
    doc = chunk_grid.to_dict() if hasattr(chunk_grid, "to_dict") else chunk_grid
    if not isinstance(doc, dict) or doc.get("name") != "regular":
        name = doc.get("name") if isinstance(doc, dict) else type(chunk_grid).__name__
        raise TypeError(f"WebPCodec needs a regular chunk grid, got {name!r}")
    return tuple(int(s) for s in doc["configuration"]["chunk_shape"])


@dataclass(frozen=True)
class WebPCodec(ArrayBytesCodec):
    """Zarr v3 serializer that stores each chunk (one image frame) as a WebP image.

    Parameters
    ----------
    level : int, default 99
        WebP quality, 0..100.  In lossy mode it is libwebp's quality factor
        (higher = better fidelity, usually larger output); in lossless mode it
        is libwebp's compression effort (higher = smaller, slower), and the
        decoded pixels are identical at every level.
    lossless : bool, default False
        Use WebP's lossless (VP8L) bitstream: decode(encode(x)) == x exactly,
        including the RGB values of fully transparent RGBA pixels.  Lossy mode
        (VP8) converts to YUV 4:2:0 and is not bit-exact.

    Array layout
    ------------
    dtype ``uint8``; array shape ``(T, H, W)`` (gray) or ``(T, H, W, C)``
    with ``C`` in {1, 3, 4} (gray, RGB, RGBA, channel order kept as is: RGB
    in, RGB out).  Chunks hold exactly one frame: ``(1, H, W)`` or
    ``(1, H, W, C)``, with the channel axis not split across chunks.  Frame
    sides are limited to :data:`MAX_FRAME_SIDE` (16382) pixels.  Gray frames
    are stored as R=G=B images (WebP has no gray mode) and turned back into
    one channel on decode.  A decoded chunk always has exactly the chunk
    shape and dtype ``uint8``.

    Raises
    ------
    TypeError
        ``level`` is not an int (bools rejected) or ``lossless`` is not a bool;
        at array creation (:meth:`validate` / :meth:`evolve_from_array_spec`)
        when the dtype is not uint8.
    ValueError
        ``level`` outside 0..100; at array creation when the rank, the
        frames per chunk, the channel count or a frame side is not supported
        (see :meth:`validate`).

    Examples
    --------
    >>> zarr.create_array(store, name="img", shape=(N, 96, 96, 3),
    ...                   chunks=(1, 96, 96, 3), dtype="uint8",
    ...                   serializer=WebPCodec(level=99, lossless=False),
    ...                   compressors=None)                       # doctest: +SKIP

    Add ``shards=(256, 96, 96, 3)`` to pack 256 frames into one stored object.
    """

    is_fixed_size = False

    level: int
    lossless: bool

    def __init__(self, *, level: int = DEFAULT_LEVEL, lossless: bool = DEFAULT_LOSSLESS) -> None:
        object.__setattr__(self, "level", _parse_level(level))
        object.__setattr__(self, "lossless", _parse_lossless(lossless))

    def __repr__(self) -> str:
        return f"WebPCodec(level={self.level!r}, lossless={self.lossless!r})"

    # -- (de)serialisation of the codec configuration ------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        """Build the codec from its ``zarr.json`` entry.

        ``data`` is ``{"name": "replaybuf.webp", "configuration": {"level": int,
        "lossless": bool}}``; a missing configuration (or missing key) means the
        defaults.  Raises ValueError for another codec name, TypeError for
        unknown configuration keys or wrongly typed values.
        """
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict) or data.get("name") != CODEC_NAME:
            name = data.get("name") if isinstance(data, dict) else data
            raise ValueError(f"expected a {CODEC_NAME!r} codec entry, got name {name!r}")
        configuration = data.get("configuration") or {}
        if not isinstance(configuration, dict):
            raise TypeError(f"{CODEC_NAME} configuration must be an object, got {configuration!r}")
        configuration = dict(configuration)
        unknown = sorted(set(configuration) - {"level", "lossless"})
        if unknown:
            raise TypeError(f"unknown {CODEC_NAME} configuration keys: {unknown}")
        return cls(**configuration)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        """Return the JSON-able ``zarr.json`` entry, always with both settings."""
        return {
            "name": CODEC_NAME,
            "configuration": {"level": self.level, "lossless": self.lossless},
        }

    # -- metadata checks -------------------------------------------------------------------

    def evolve_from_array_spec(self, array_spec: Any) -> Self:
        """Check dtype and rank; return ``self`` unchanged (nothing to infer).

        zarr calls this with the *array* spec for an unsharded array and with the
        *inner-chunk* spec when the codec sits inside a ``ShardingCodec``.  The
        sharding codec does not forward :meth:`validate` to its inner codecs, so
        this hook is the only place where a sharded WebP array can be rejected at
        creation time.  Only checks that hold for both kinds of spec are done
        here (uint8, rank 3 or 4, channel count); the per-chunk checks run in
        :meth:`validate` and again before each encode.

        Raises TypeError (dtype) or ValueError (rank, channels).
        """
        _check_dtype(array_spec.dtype)
        shape = tuple(array_spec.shape)
        _check_rank(shape, "array")
        if len(shape) == 4 and shape[3] not in _ALLOWED_CHANNELS:
            raise ValueError(
                f"WebPCodec supports 1 (gray), 3 (RGB) or 4 (RGBA) channels; "
                f"shape {shape} has {shape[3]} channels"
            )
        return self

    def validate(
        self,
        *,
        shape: tuple[int, ...],
        dtype: Any,
        chunk_grid: Any,
    ) -> None:
        """Check the array metadata at creation (and open) time.

        Parameters
        ----------
        shape : tuple of int
            Array shape, ``(T, H, W)`` or ``(T, H, W, C)``.
        dtype : zarr data type (``ZDType``) or numpy dtype
            Must be uint8.
        chunk_grid : zarr chunk grid (metadata)
            Must be a regular grid with chunk shape ``(1, H', W'[, C])``; read through its
            ``to_dict()`` (the ``chunk_grid`` entry of ``zarr.json``), so it works on every zarr.

        Raises
        ------
        TypeError
            dtype is not uint8, or the chunk grid is not regular.
        ValueError
            Rank not 3 or 4; more than one frame per chunk; channels not in
            {1, 3, 4} or split across chunks; a frame side above 16382 px.
        """
        _check_dtype(dtype)
        _check_rank(tuple(shape), "array")
        chunk_shape = _regular_chunk_shape(chunk_grid)
        check_chunk_shape(chunk_shape)
        if len(shape) == 4 and chunk_shape[3] != shape[3]:
            raise ValueError(
                f"WebPCodec chunks must hold all channels of a pixel: array shape "
                f"{tuple(shape)} has {shape[3]} channels but chunk shape {chunk_shape} "
                f"has {chunk_shape[3]}"
            )

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: Any) -> int:
        """WebP output has no fixed size: always raises NotImplementedError."""
        raise NotImplementedError("WebPCodec produces variable-size output")

    # -- encoding / decoding ---------------------------------------------------------------

    def encode_frame(self, chunk: np.ndarray) -> bytes:
        """Encode one chunk to WebP bytes (synchronous; releases the GIL).

        Parameters
        ----------
        chunk : numpy.ndarray, uint8, shape (1, H, W) or (1, H, W, C), C in {1, 3, 4}

        Returns
        -------
        bytes
            A complete WebP file (RIFF container, VP8L when lossless, VP8 otherwise).

        Raises TypeError (dtype) / ValueError (shape) like :meth:`validate`.
        """
        chunk = np.asarray(chunk)
        _check_dtype(chunk.dtype)
        check_chunk_shape(chunk.shape)
        frame = chunk[0]
        if frame.ndim == 3 and frame.shape[2] == 1:
            frame = frame[..., 0]
        if frame.ndim == 2:
            # WebP has no gray mode: store R = G = B.
            frame = np.repeat(frame[..., None], 3, axis=2)
        frame = np.ascontiguousarray(frame)
        # imagecodecs encodes losslessly whenever ``lossless`` is None (its
        # default), whatever ``level`` is -- so always pass both explicitly.
        return imagecodecs.webp_encode(
            frame, level=self.level, lossless=self.lossless, method=WEBP_METHOD
        )

    def decode_frame(self, data: bytes, chunk_shape: tuple[int, ...]) -> np.ndarray:
        """Decode WebP bytes back to one chunk of exactly ``chunk_shape`` (uint8).

        RGBA chunks are decoded with ``hasalpha=True`` because libwebp drops an
        all-opaque alpha channel when encoding; gray chunks are decoded as RGB
        and reduced to one channel with the rounded channel mean (exact for
        lossless data, where R = G = B).

        Raises ValueError when the image size does not match ``chunk_shape``.
        """
        chunk_shape = tuple(int(s) for s in chunk_shape)
        channels = chunk_shape[3] if len(chunk_shape) == 4 else 1
        img = imagecodecs.webp_decode(data, hasalpha=channels == 4)
        if img.shape[:2] != chunk_shape[1:3]:
            raise ValueError(
                f"WebP image is {img.shape[0]}x{img.shape[1]} px but the chunk shape "
                f"{chunk_shape} expects {chunk_shape[1]}x{chunk_shape[2]} px"
            )
        if channels == 1:
            total = img[..., :3].sum(axis=2, dtype=np.uint16)
            img = ((total + 1) // 3).astype(np.uint8)
        return img.reshape(chunk_shape)

    # zarr's codec contract: ``chunk_spec`` has ``shape`` and ``prototype`` (``.buffer.from_bytes``,
    # ``.nd_buffer.from_numpy_array``); buffers have ``as_numpy_array()``.  The ``_sync`` pair is what
    # zarr >= 3.2 calls on its synchronous path (older zarr ignores it).
    def _encode_sync(self, chunk_array: Any, chunk_spec: Any) -> Any:
        return chunk_spec.prototype.buffer.from_bytes(self.encode_frame(chunk_array.as_numpy_array()))

    def _decode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        frame = self.decode_frame(chunk_bytes.as_numpy_array(), chunk_spec.shape)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(frame)

    async def _encode_single(self, chunk_array: Any, chunk_spec: Any) -> Any:
        return await asyncio.to_thread(self._encode_sync, chunk_array, chunk_spec)

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)


register_codec(CODEC_NAME, WebPCodec)
