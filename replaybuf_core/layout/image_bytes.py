"""The hand-over of a source's own encoded images (JPEG bytes) to the frame codec of the same format
(pass-through import of JPEG camera frames: an RLDS import with a JPEG ``frames=`` codec).

Like :mod:`.video_packets`, the bytes travel beside the pixels, addressed by content: the source, as
it decodes an image, :func:`register` s the decoded pixels with the bytes (and their format); the
frame codec asked to encode a frame :func:`claim` s bytes of its own format that decode to exactly
these pixels, and stores them unchanged.  Any registered bytes that decoded to these pixels are a
correct encoding of them, so no position bookkeeping is needed; a frame with no record is encoded by
the codec itself, and the import's bit-for-bit check of every stored row says so — never silently.

The decode that produced the registered pixels must be the codec's own (``imagecodecs.jpeg8_decode``
for ``replaybuf.jpeg``): then the stored frame reads back bit for bit as the source's decode.

Records are kept until evicted, oldest first, past :data:`MAX_BYTES` bytes of images, and dropped when
the last open :func:`session` ends.  Thread-safe.  Lives in ``layout`` because both sides import it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

from .import_sessions import ImportSessions
from .video_packets import _digest

__all__ = ["register", "claim", "registered", "session", "clear", "MAX_BYTES"]

#: Bytes of registered images kept at most (oldest evicted first).
MAX_BYTES = 256 * 2**20

_lock = threading.Lock()
_records: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()
_bytes = 0


def register(frame: np.ndarray, data: bytes, fmt: str = "jpeg") -> None:
    """Say that the image ``data`` (format ``fmt``) decodes to ``frame`` (uint8 ``(H, W[, C])`` as the
    import stores it).  A no-op outside a :func:`session`."""
    global _bytes
    if not _sessions:
        return
    key = (fmt, _digest(frame))
    with _lock:
        old = _records.pop(key, None)
        _bytes -= len(old) if old is not None else 0
        _records[key] = bytes(data)
        _bytes += len(data)
        while _records and _bytes > MAX_BYTES:
            _, dropped = _records.popitem(last=False)
            _bytes -= len(dropped)


def registered() -> int:
    """How many images hold a record now (0: the codec encodes every frame itself, without hashing)."""
    return len(_records)


def claim(frame: np.ndarray, fmt: str = "jpeg") -> bytes | None:
    """Registered bytes of format ``fmt`` decoding to ``frame``, or None."""
    if not _records:
        return None
    with _lock:
        return _records.get((fmt, _digest(frame)))


def clear() -> None:
    """Drop every record."""
    global _bytes
    with _lock:
        _records.clear()
        _bytes = 0


def _after_fork_in_child() -> None:
    global _lock, _bytes
    _lock = threading.Lock()
    _records.clear()
    _bytes = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


#: open imports; the records are dropped when the last one ends
_sessions = ImportSessions(clear)
session = _sessions.session
