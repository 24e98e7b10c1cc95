"""TFRecord files without TensorFlow: the framing, its masked CRC-32C checks, gzip shards.

A TFRecord file is a sequence of records, each (TensorFlow's ``core/lib/io/record_writer.cc``)::

    uint64 length            little-endian
    uint32 masked_crc32c(length's 8 bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod 2**32).  A ``GZIP`` file
(TFDS's ``.gz`` shards, ``tf.io.TFRecordOptions("GZIP")``) is that stream gzip-compressed as a
whole.  CRC-32C is google-crc32c's (a dependency of replaybuf; hardware-accelerated).

:func:`index_records` walks a file's framing and checks both CRCs of every record (each record's
bytes are read once, to check them); :func:`read_record` reads one record by its offset and checks
it again.  Every error is a :class:`RecordError` naming the file, the record's number and offset.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import google_crc32c

__all__ = ["RecordError", "Record", "RecordReader", "masked_crc", "is_gzip", "index_records", "read_record", "iter_records",
           "frame_record", "write_records"]

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
#: gzip's magic bytes (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"


class RecordError(ValueError):
    """A TFRecord file that cannot be read: truncated, a CRC mismatch, a length past the end.

    Attributes: ``path``, ``record`` (0-based number of the record in the file), ``offset`` (its byte
    offset, in the decompressed stream for a gzip file) and ``what``."""

    def __init__(self, path: str, record: int, offset: int, what: str):
        super().__init__(f"{path}: record {record} (byte {offset}): {what}")
        self.path, self.record, self.offset, self.what = path, record, offset, what


@dataclass(frozen=True)
class Record:
    """Where one record's data is: ``offset`` of the data (after its 12-byte header) and ``length``
    in bytes (in the decompressed stream for a gzip file)."""

    offset: int
    length: int


def masked_crc(data: bytes | memoryview) -> int:
    """TensorFlow's masked CRC-32C of ``data`` (uint32)."""
    crc = google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def is_gzip(path: str | os.PathLike) -> bool:
    """True when the file is gzip-compressed: it starts with gzip's magic bytes ``1f 8b`` and either
    ends in ``.gz`` or does not open with a valid TFRecord header (a plain file starts with its first
    record's length, little-endian, which begins ``1f 8b`` only for a length of 35615 mod 65536)."""
    p = os.fspath(path)
    with open(p, "rb") as f:
        head = f.read(2)
    return head == GZIP_MAGIC and (p.endswith(".gz") or not _plain_header_ok(p))


def _plain_header_ok(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) < 12:
        return False
    length, crc = _HEADER.unpack(head)
    return masked_crc(head[:8]) == crc


def _open(path: str):
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def _read_exact(f, n: int) -> bytes:
    try:
        return f.read(n)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise _StreamError(str(exc)) from exc


class _StreamError(Exception):
    pass


def iter_records(path: str | os.PathLike, *, check_data: bool = True) -> Iterator[tuple[Record, bytes]]:
    """Every record of the file, in order: ``(Record, data)``.

    Raises :class:`RecordError` (naming the file and record) for a truncated file, a length whose CRC
    does not match, a data CRC mismatch (when ``check_data``) or a damaged gzip stream."""
    p = os.fspath(path)
    n, pos = 0, 0
    with _open(p) as f:
        while True:
            try:
                head = _read_exact(f, _HEADER.size)
            except _StreamError as exc:
                raise RecordError(p, n, pos, f"the gzip stream is damaged or truncated ({exc})") from None
            if not head:
                return
            if len(head) < _HEADER.size:
                raise RecordError(p, n, pos, f"truncated: {len(head)} bytes of a 12-byte record header "
                                             "at the end of the file")
            length, crc = _HEADER.unpack(head)
            if masked_crc(head[:8]) != crc:
                raise RecordError(p, n, pos, "the CRC of the record's length does not match (damaged file, or "
                                             "not a TFRecord file)")
            try:
                data = _read_exact(f, length)
                foot = _read_exact(f, _FOOTER.size)
            except _StreamError as exc:
                raise RecordError(p, n, pos, f"the gzip stream is damaged or truncated ({exc})") from None
            if len(data) < length or len(foot) < _FOOTER.size:
                raise RecordError(p, n, pos, f"truncated: the record holds {length} bytes, the file ends "
                                             f"{len(data)} bytes into it")
            if check_data and masked_crc(data) != _FOOTER.unpack(foot)[0]:
                raise RecordError(p, n, pos, f"the CRC of the record's {length} bytes of data does not match "
                                             "(damaged file)")
            yield Record(pos + _HEADER.size, length), data
            pos += _HEADER.size + length + _FOOTER.size
            n += 1


def index_records(path: str | os.PathLike) -> list[Record]:
    """The records of a file (their offsets and lengths), every CRC checked.

    Raises :class:`RecordError` as :func:`iter_records`."""
    return [rec for rec, _ in iter_records(path)]


def read_record(path: str | os.PathLike, number: int, record: Record, *, handle=None) -> bytes:
    """The data of record ``number`` (at ``record``) of an uncompressed file, its data CRC checked.
    ``handle``: an open binary file of ``path`` to read from (else it is opened).

    Raises :class:`RecordError` naming the file and record for a short read or a CRC mismatch."""
    p = os.fspath(path)
    start = record.offset - _HEADER.size
    f = handle if handle is not None else open(p, "rb")
    try:
        f.seek(record.offset)
        buf = f.read(record.length + _FOOTER.size)
    finally:
        if handle is None:
            f.close()
    if len(buf) < record.length + _FOOTER.size:
        raise RecordError(p, number, start, f"truncated: the record holds {record.length} bytes, the file ends "
                                            f"{max(0, len(buf))} bytes into it (the file changed since it was indexed?)")
    data = buf[:record.length]
    if masked_crc(data) != _FOOTER.unpack_from(buf, record.length)[0]:
        raise RecordError(p, number, start, f"the CRC of the record's {record.length} bytes of data does not match "
                                            "(damaged file)")
    return data


def frame_record(data: bytes) -> bytes:
    """One record's bytes on disk: header, ``data``, footer (TensorFlow's framing)."""
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def write_records(path: str | os.PathLike, records: list[bytes], *, compress: bool = False) -> None:
    """Write ``records`` as a TFRecord file (gzip-compressed when ``compress``): for tests and tools."""
    body = b"".join(frame_record(r) for r in records)
    if compress:
        body = gzip.compress(body, mtime=0)
    with open(os.fspath(path), "wb") as f:
        f.write(body)


class RecordReader:
    """Reads records of one file by number and place (from :func:`index_records`), their data CRC
    checked: a plain file by seeking, a gzip file by decompressing forward (reopened to go back, so
    reading in order decompresses it once).  Not thread-safe; :meth:`close` it."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.gzip = is_gzip(self.path)
        self._f = None
        self._pos = 0  # a gzip stream's position (decompressed bytes)

    def read(self, number: int, record: Record) -> bytes:
        """The data of record ``number`` at ``record``.  Raises :class:`RecordError`."""
        if not self.gzip:
            if self._f is None:
                self._f = open(self.path, "rb")
            return read_record(self.path, number, record, handle=self._f)
        start = record.offset - _HEADER.size
        if self._f is None or self._pos > start:
            self.close()
            self._f, self._pos = gzip.open(self.path, "rb"), 0
        try:
            while self._pos < start:  # skip forward
                got = len(self._f.read(min(start - self._pos, 1 << 24)))
                if not got:
                    break
                self._pos += got
            buf = self._f.read(_HEADER.size + record.length + _FOOTER.size)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            self.close()
            raise RecordError(self.path, number, start, f"the gzip stream is damaged or truncated ({exc})") from None
        self._pos += len(buf)
        if len(buf) < _HEADER.size + record.length + _FOOTER.size:
            raise RecordError(self.path, number, start, "truncated (the file changed since it was indexed?)")
        data = buf[_HEADER.size:_HEADER.size + record.length]
        if masked_crc(data) != _FOOTER.unpack_from(buf, _HEADER.size + record.length)[0]:
            raise RecordError(self.path, number, start, f"the CRC of the record's {record.length} bytes of data does "
                                                        "not match (damaged file)")
        return data

    def read_span(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of a plain file (no CRC: a part of a record)."""
        if self.gzip:
            raise ValueError(f"{self.path}: a gzip file has no random access")
        if self._f is None:
            self._f = open(self.path, "rb")
        self._f.seek(offset)
        return self._f.read(length)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
