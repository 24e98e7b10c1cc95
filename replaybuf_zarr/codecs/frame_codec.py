"""What every replaybuf frame codec shares: a Zarr v3 array→bytes serializer that stores each chunk —
exactly one camera frame ``(1, H, W[, C])`` of ``uint8`` — as one standalone image file.

A subclass names itself (:attr:`FrameCodec.codec_name`, the ``name`` written to ``zarr.json``), its
configuration keys (:attr:`FrameCodec.config_keys`, each a constructor keyword), the channel counts
and frame side it can hold, and encodes/decodes one frame with imagecodecs (which releases the GIL).
The checks of dtype, rank, chunk shape and configuration, zarr's codec hooks and the
``zarr.json`` round trip live here once.

This module imports nothing from replaybuf beyond its own package: zarr's entry point loads the codecs
in processes that only have zarr in mind.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from zarr.abc.codec import ArrayBytesCodec

if TYPE_CHECKING:
    from typing import Self

#: zarr-python's own types (``ArraySpec``, ``Buffer``, ``ChunkGrid`` ...) live in ``zarr.core`` and move
#: between releases; the codecs only use their documented attributes, so they are annotated loosely.
JSON = Any

__all__ = ["FrameCodec", "check_int", "regular_chunk_shape"]


def regular_chunk_shape(chunk_grid: Any, codec: str) -> tuple[int, ...]:
    """The chunk shape of a regular chunk grid, from its ``zarr.json`` form
    ``{"name": "regular", "configuration": {"chunk_shape": [...]}}`` (Zarr v3 core spec).

    Raises TypeError (naming ``codec``) for any other grid (e.g. zarr 3.4's rectilinear grids).
    """
    doc = chunk_grid.to_dict() if hasattr(chunk_grid, "to_dict") else chunk_grid
    if not isinstance(doc, dict) or doc.get("name") != "regular":
        name = doc.get("name") if isinstance(doc, dict) else type(chunk_grid).__name__
        raise TypeError(f"{codec} needs a regular chunk grid, got {name!r}")
    return tuple(int(s) for s in doc["configuration"]["chunk_shape"])


@dataclass(frozen=True)
class FrameCodec(ArrayBytesCodec):
    """Base of the frame serializers (one ``uint8`` frame a chunk, one image file a chunk).

    Subclasses set the class attributes below, a constructor taking exactly :attr:`config_keys` as
    keywords (checked, stored as frozen dataclass fields), :meth:`encode_image` and :meth:`decode_image`.

    Array layout: dtype ``uint8``; shape ``(T, H, W)`` (gray) or ``(T, H, W, C)`` with ``C`` in
    :attr:`channels`; chunks ``(1, H, W[, C])`` holding all channels; sides 1..:attr:`max_side` px.
    A decoded chunk always has exactly the chunk shape.

    Raises (at array creation, open and before each encode): TypeError for a dtype other than uint8 or
    a chunk grid that is not regular; ValueError for the rank, frames per chunk, channels or a side.
    """

    is_fixed_size = False

    #: the ``name`` in ``zarr.json`` (and in zarr's codec registry)
    codec_name: ClassVar[str] = ""
    #: the configuration keys, in ``zarr.json`` order; each is a constructor keyword
    config_keys: ClassVar[tuple[str, ...]] = ()
    #: channel counts a 4-D array may have on its last axis
    channels: ClassVar[tuple[int, ...]] = (1, 3, 4)
    #: largest frame side in pixels
    max_side: ClassVar[int] = 65535
    #: why the side is limited (appended to the error)
    max_side_reason: ClassVar[str] = ""
    #: frames (steps) per chunk: one for the image codecs; a video codec's GOP length
    frames_per_chunk: ClassVar[int] = 1
    # Subclasses also provide ``lossless`` (True when decode(encode(x)) == x for every frame): a
    # class attribute, or a configuration field (WebP).

    # -- checks ------------------------------------------------------------------------------------

    @classmethod
    def _check_dtype(cls, dtype: Any) -> None:
        native = dtype.to_native_dtype() if hasattr(dtype, "to_native_dtype") else np.dtype(dtype)
        if native != np.dtype(np.uint8):
            raise TypeError(
                f"{cls.__name__} only stores uint8 images; got dtype {native} "
                f"(convert e.g. float frames with values in 0..255 via .astype(np.uint8))"
            )

    @classmethod
    def _check_rank(cls, shape: tuple[int, ...], what: str) -> None:
        if len(shape) not in (3, 4):
            raise ValueError(
                f"{cls.__name__} needs a 3-D (T, H, W) gray or 4-D (T, H, W, C) {what}; "
                f"got {len(shape)}-D shape {tuple(shape)}"
            )

    @classmethod
    def _channel_error(cls, shape: tuple[int, ...], what: str) -> ValueError:
        allowed = {1: "1 (gray)", 3: "3 (RGB)", 4: "4 (RGBA)"}
        names = " or ".join(", ".join(allowed[c] for c in cls.channels).rsplit(", ", 1))
        return ValueError(f"{cls.__name__} supports {names} channels; {what} {shape} has {shape[3]} channels")

    @classmethod
    def check_chunk_shape(cls, chunk_shape: tuple[int, ...]) -> None:
        """Check one chunk shape: rank, one frame, channel count, side limit (ValueError naming it)."""
        cls._check_frames_shape(chunk_shape, 1)

    @classmethod
    def _check_frames_shape(cls, chunk_shape: tuple[int, ...], frames: int) -> None:
        chunk_shape = tuple(int(s) for s in chunk_shape)
        cls._check_rank(chunk_shape, "chunk shape")
        if chunk_shape[0] != frames:
            what = "exactly one frame per chunk" if frames == 1 else f"{frames} frames per chunk (its GOP)"
            raise ValueError(
                f"{cls.__name__} stores {what}: the chunk shape must be "
                f"({frames}, H, W[, C]) but has {chunk_shape[0]} frames on axis 0 (chunk shape {chunk_shape})"
            )
        if len(chunk_shape) == 4 and chunk_shape[3] not in cls.channels:
            raise cls._channel_error(chunk_shape, "chunk shape")
        for name, side in (("height", chunk_shape[1]), ("width", chunk_shape[2])):
            if side < 1:
                raise ValueError(f"{cls.__name__} frame {name} must be >= 1, got {side}")
            if side > cls.max_side:
                raise ValueError(
                    f"{cls.__name__} frame {name} {side} px exceeds the limit of {cls.max_side} px"
                    f"{cls.max_side_reason}; chunk shape {chunk_shape}"
                )

    # -- (de)serialisation of the configuration ------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        """Build the codec from its ``zarr.json`` entry ``{"name": codec_name, "configuration": {...}}``;
        a missing configuration (or key) means the defaults.  Raises ValueError for another codec
        name, TypeError for unknown configuration keys or wrongly typed values."""
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict) or data.get("name") != cls.codec_name:
            name = data.get("name") if isinstance(data, dict) else data
            raise ValueError(f"expected a {cls.codec_name!r} codec entry, got name {name!r}")
        configuration = data.get("configuration") or {}
        if not isinstance(configuration, dict):
            raise TypeError(f"{cls.codec_name} configuration must be an object, got {configuration!r}")
        unknown = sorted(set(configuration) - set(cls.config_keys))
        if unknown:
            raise TypeError(f"unknown {cls.codec_name} configuration keys: {unknown}")
        return cls(**configuration)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        """The JSON-able ``zarr.json`` entry, always with every setting."""
        return {"name": self.codec_name,
                "configuration": {k: getattr(self, k) for k in self.config_keys}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.config_keys)
        return f"{type(self).__name__}({args})"

    # -- zarr's metadata hooks -------------------------------------------------------------------

    def evolve_from_array_spec(self, array_spec: Any) -> Self:
        """Check dtype, rank and channels; return ``self`` unchanged.

        zarr calls this with the *array* spec for an unsharded array and with the *inner-chunk* spec
        inside a ``ShardingCodec``, which does not forward :meth:`validate` — so this hook is where a
        sharded frame array is rejected at creation.  Raises TypeError (dtype) or ValueError.
        """
        self._check_dtype(array_spec.dtype)
        shape = tuple(array_spec.shape)
        self._check_rank(shape, "array")
        if len(shape) == 4 and shape[3] not in self.channels:
            raise self._channel_error(shape, "shape")
        return self

    def validate(self, *, shape: tuple[int, ...], dtype: Any, chunk_grid: Any) -> None:
        """Check the array metadata at creation (and open): uint8, rank 3 or 4, a regular grid of
        ``(1, H', W'[, C])`` chunks holding all channels.  Raises TypeError / ValueError naming it."""
        self._check_dtype(dtype)
        self._check_rank(tuple(shape), "array")
        chunk_shape = regular_chunk_shape(chunk_grid, type(self).__name__)
        self.check_chunk_shape(chunk_shape)
        if len(shape) == 4 and chunk_shape[3] != shape[3]:
            raise ValueError(
                f"{type(self).__name__} chunks must hold all channels of a pixel: array shape "
                f"{tuple(shape)} has {shape[3]} channels but chunk shape {chunk_shape} has {chunk_shape[3]}"
            )

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: Any) -> int:
        """Image files have no fixed size: always raises NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} produces variable-size output")

    # -- one frame ---------------------------------------------------------------------------------

    def encode_image(self, frame: np.ndarray) -> bytes:  # pragma: no cover - abstract
        """Encode one contiguous ``(H, W)`` gray or ``(H, W, C)`` colour frame."""
        raise NotImplementedError

    def decode_image(self, data: bytes, channels: int) -> np.ndarray:  # pragma: no cover - abstract
        """Decode one image to ``(H, W)`` (gray) or ``(H, W, channels)``."""
        raise NotImplementedError

    def encode_frame(self, chunk: np.ndarray) -> bytes:
        """Encode one chunk — uint8 ``(1, H, W)`` or ``(1, H, W, C)`` — to one image file (releases
        the GIL).  Raises TypeError (dtype) / ValueError (shape) like :meth:`validate`."""
        chunk = np.asarray(chunk)
        self._check_dtype(chunk.dtype)
        self.check_chunk_shape(chunk.shape)
        frame = chunk[0]
        if frame.ndim == 3 and frame.shape[2] == 1:
            frame = frame[..., 0]
        return self.encode_image(np.ascontiguousarray(frame))

    def decode_frame(self, data: bytes, chunk_shape: tuple[int, ...]) -> np.ndarray:
        """Decode one image back to a chunk of exactly ``chunk_shape`` (uint8).

        Raises ValueError when the image's size or channels do not match ``chunk_shape``.
        """
        chunk_shape = tuple(int(s) for s in chunk_shape)
        channels = chunk_shape[3] if len(chunk_shape) == 4 else 1
        img = self.decode_image(data, channels)
        if img.shape[:2] != chunk_shape[1:3]:
            raise ValueError(
                f"{type(self).__name__}: the image is {img.shape[0]}x{img.shape[1]} px but the chunk shape "
                f"{chunk_shape} expects {chunk_shape[1]}x{chunk_shape[2]} px"
            )
        if img.size != int(np.prod(chunk_shape)):
            got = img.shape[2] if img.ndim == 3 else 1
            raise ValueError(f"{type(self).__name__}: the image has {got} channels but the chunk shape "
                             f"{chunk_shape} expects {channels}")
        return img.reshape(chunk_shape)

    def decode_resized(self, data: bytes, chunk_shape: tuple[int, ...], rows: list[int], fr: Any) -> np.ndarray:
        """The frames at ``rows`` (ascending places in the chunk) of one chunk, cropped and resized as
        ``fr`` (a :class:`~replaybuf_core.layout.frame_resize.FrameResize`) says: uint8
        ``(len(rows), fr.height, fr.width[, C])``.  Here: the whole chunk decoded, then each frame
        resized (Pillow, bilinear); codecs that can decode smaller for less override it.

        Raises ValueError like :meth:`decode_frame`."""
        from replaybuf_core.layout.frame_resize import resize_frame

        chunk = self.decode_frame(data, chunk_shape)
        return np.stack([resize_frame(chunk[r], fr) for r in rows])

    def splice_chunk(self, pieces: Sequence[tuple[bytes, int, int]], frames: int) -> bytes | None:
        """The stored bytes of one chunk of ``frames`` frames made of ``pieces`` — ``(chunk bytes as
        this codec stored them, lo, hi)``: frames ``[lo, hi)`` of that chunk, in order — without
        decoding or encoding a frame (every frame stays bit for bit what it was), or None when this
        codec cannot (the caller then decodes and encodes).  Here (one frame a chunk): a chunk
        made of one whole stored chunk is those bytes; codecs holding several frames a chunk
        override it (the video codec re-cuts its segments)."""
        if self.frames_per_chunk == 1 and frames == 1 and len(pieces) == 1 and tuple(pieces[0][1:]) == (0, 1):
            return bytes(pieces[0][0])
        return None

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


def check_int(codec: str, key: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in ``low..high`` (bools refused); TypeError / ValueError naming ``codec.key``."""
    import numbers

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{codec} {key} must be an int in {low}..{high}, got {value!r} "
                        f"of type {type(value).__name__}")
    value = int(value)
    if not low <= value <= high:
        raise ValueError(f"{codec} {key} must be in {low}..{high}, got {value}")
    return value
