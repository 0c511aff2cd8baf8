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
        # one buffer of the exact size, no growing stream: Arrow's allocator keeps freed blocks
        sized = pa.MockOutputStream()
        with pa.ipc.new_stream(sized, table.schema) as writer:
            writer.write_table(table)
        buffer = pa.allocate_buffer(sized.size())
        with pa.ipc.new_stream(pa.FixedSizeBufferWriter(buffer), table.schema) as writer:
            writer.write_table(table)
        payload = memoryview(buffer)  # no copy: the header and the payload go out as two buffers
        header = _HEADER.pack(_MAGIC, zlib.crc32(payload), payload.nbytes)
        size = len(header) + payload.nbytes
        try:
            written = os.pwritev(self._fd, [header, payload], self._size)
            while written < size:  # a short write: the rest, one buffer at a time
                rest = header[written:] if written < len(header) else payload[written - len(header):]
                written += os.pwrite(self._fd, rest, self._size + written)
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
