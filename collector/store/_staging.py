"""The staging log: acknowledged span batches that are durable on disk but not yet in DuckDB.

DuckDB's INSERT has a fixed cost per statement and column (~5 ms for the 44 columns of ``spans`` on
the reference machine, whatever the row count), so a collector that commits every export on its own
spends half its writer's time on that fixed cost. The collector therefore appends each export's
prepared rows to this log, forces them to disk (``fdatasync``), answers the export, and moves what
the log holds into DuckDB in one larger INSERT about once a second (see `SpanStore.stage`).

A record is a 16-byte header (magic, CRC-32 of the payload, payload length) and an Arrow IPC stream
of the rows. A crash can leave a torn last record: it was never acknowledged (the acknowledgement
waits for ``fdatasync``), so reading stops there. Reading is only needed at start, when a previous
process did not move everything; moving again rows that were already moved is harmless, since the
store ignores a (trace_id, span_id) it holds.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass

import pyarrow as pa

from meritlens.collector._settings import staging_path

__all__ = ["StagedRecords", "StagingLog", "read_staged", "set_aside", "staging_path"]

_MAGIC = b"MLS1"
_HEADER = struct.Struct("<4sIQ")
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""An IPC stream's end: the continuation marker and a zero length."""
_MAX_BUFFERS_PER_WRITE = 512
"""Below the system's IOV_MAX (1024 on Linux)."""


@dataclass(frozen=True)
class StagedRecords:
    """What `read_staged` found: the batches of every whole record, and where reading stopped."""

    tables: list[pa.Table]
    valid_bytes: int
    file_bytes: int

    @property
    def torn_bytes(self) -> int:
        """Bytes after the last whole record (a write cut short by a crash, never acknowledged)."""
        return self.file_bytes - self.valid_bytes


def read_staged(path: str) -> StagedRecords:
    """The whole records of the log at ``path`` (none when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            data = memoryview(fh.read())  # records are sliced without copies
    except FileNotFoundError:
        return StagedRecords([], 0, 0)
    tables, offset = [], 0
    while offset + _HEADER.size <= len(data):
        magic, crc, length = _HEADER.unpack_from(data, offset)
        start, end = offset + _HEADER.size, offset + _HEADER.size + length
        if magic != _MAGIC or end > len(data) or zlib.crc32(data[start:end]) != crc:
            break
        tables.append(pa.ipc.open_stream(pa.py_buffer(data[start:end])).read_all())
        offset = end
    return StagedRecords(tables, offset, len(data))


class StagingLog:
    """An append-only file of span batches; `append` returns once the batch is on disk.

    Not thread-safe: the store serializes its appends and its emptying (`SpanStore.stage`,
    `SpanStore.move_staged`)."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._size = 0
        self.broken: str | None = None
        """Why the log refuses appends: a write failed and could not be undone."""
        self._schema: pa.Schema | None = None
        self._schema_bytes = b""

    def _schema_message(self, schema: pa.Schema) -> bytes:
        if self._schema is None or not schema.equals(self._schema, check_metadata=True):
            self._schema, self._schema_bytes = schema, schema.serialize().to_pybytes()
        return self._schema_bytes

    def open(self) -> None:
        """Open (creating) the log for appending, after `read_staged` took up what it held and the
        caller moved it: the file starts empty."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(fd, 0)
        os.fsync(fd)
        _sync_directory(self.path)  # the file's own entry survives a crash
        self._fd, self._size = fd, 0

    def append(self, table: pa.Table) -> None:
        """Write one batch and force it to disk. On failure the file is cut back to its previous end
        (so later records stay readable) and the error is raised: nothing of this batch counts."""
        if self._fd is None:
            raise RuntimeError("the staging log is not open")
        if self.broken:
            raise OSError(f"the staging log {self.path} refuses writes: {self.broken}")
        # The record is an IPC stream put together from its messages: the schema's (serialized once
        # per schema), each batch's and the end-of-stream marker; the same bytes as Arrow's stream
        # writer, which serialized every batch twice here (once to size the buffer).
        parts = [self._schema_message(table.schema), *(batch.serialize() for batch in table.to_batches()), _EOS]
        crc, length = 0, 0
        for part in parts:
            crc, length = zlib.crc32(part, crc), length + len(part)
        header = _HEADER.pack(_MAGIC, crc, length)
        size = len(header) + length
        try:
            _write_all(self._fd, [header, *parts], self._size)
            os.fdatasync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._size)
                os.fdatasync(self._fd)
            except OSError as undo:
                self.broken = f"a failed write ({exc}) could not be cut back ({undo})"
            raise
        self._size += size

    @property
    def size(self) -> int:
        """Bytes of the whole records the log holds."""
        return self._size

    def clear(self) -> None:
        """Empty the log: everything it held is committed in DuckDB. Not forced to disk: records
        that come back after a crash are ignored as duplicates."""
        if self._fd is not None and self._size:
            os.ftruncate(self._fd, 0)
            self._size = 0

    def close(self, *, remove: bool) -> None:
        """Close the file; ``remove`` deletes it (everything it held is committed)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        if remove and not self.broken:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _write_all(fd: int, buffers: list, offset: int) -> None:
    """Write ``buffers`` one after another at ``offset``, whatever short writes the system makes."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        written = os.pwritev(fd, views[:_MAX_BUFFERS_PER_WRITE], offset)
        if written <= 0:
            raise OSError(f"a write of the staging log at offset {offset} wrote nothing")
        offset += written
        while views and written >= views[0].nbytes:
            written -= views[0].nbytes
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def set_aside(path: str) -> str:
    """Rename a log that cannot be taken up, so that nothing in it is lost; returns the new name."""
    aside = f"{path}.unrecovered-{time.strftime('%Y%m%dT%H%M%S')}"
    os.replace(path, aside)
    return aside


def _sync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
