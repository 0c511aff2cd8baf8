"""A collector's span sink on a lake: acknowledged exports go to a local staging log, then into
immutable Parquet segments under ``PATH/spans/``.

The same durability rule as the DuckDB store: an export is answered only once its rows are forced to
the staging log (`meritlens.collector.store._staging`, the same format); about once a second, or when
enough rows wait, the staged rows become one segment, published atomically (temporary name, fsync,
rename), and the log is emptied. A collector killed between the two publishes the log again at its
next start: the segment that may already hold those rows is then duplicated, which every reader
removes (a span is identified by ``(trace_id, span_id)``, across collectors and retries alike).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time

import pyarrow as pa

from meritlens.collector._settings import DEFAULT_STAGE_MOVE_ROWS, DEFAULT_STAGE_MOVE_S, DEFAULT_WINDOW_LAG_ROWS
from meritlens.collector.lake._layout import COLLECTORS_DIR, SEGMENT_SUFFIX, SPANS_DIR, Lake, spans_schema, unique_stem
from meritlens.collector.store._staging import StagingLog, read_staged, set_aside
from meritlens.collector.store._rows import concat, first_of_each_span, stamp_received_at

log = logging.getLogger("meritlens.collector.lake")

LOG_KEEP_BYTES = 64 * 1024 * 1024
"""Up to this size the staging log keeps records already published while later exports wait in it."""
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._")


class LakeInUse(RuntimeError):
    """Another running collector holds this collector id on the lake."""


def check_collector_id(collector_id: str) -> str:
    """``collector_id`` when it can name files (letters, digits, '.', '_'), else ValueError."""
    if not collector_id or not set(collector_id) <= _ID_CHARS or collector_id.startswith("."):
        raise ValueError(f"collector id {collector_id!r} must be letters, digits, '.' or '_' (it names segment files)")
    return collector_id


def default_collector_id() -> str:
    return "".join(c if c in _ID_CHARS else "_" for c in socket.gethostname()) or "collector"


class SegmentWriter:
    """The write side of a lake for one collector: `stage`, `move_due` and `move_staged` as
    `IngestPipeline` drives a `SpanStore` (one writer thread stages, one mover publishes)."""

    def __init__(self, lake: Lake, collector_id: str, *, stage_move_rows: int = DEFAULT_STAGE_MOVE_ROWS,
                 stage_move_s: float = DEFAULT_STAGE_MOVE_S, max_staged_rows: int = DEFAULT_WINDOW_LAG_ROWS,
                 local_dir: str | None = None):
        self.lake = lake
        self.collector_id = check_collector_id(collector_id)
        self._local_dir = local_dir or (lake.path(COLLECTORS_DIR) if not lake.remote else
                                        os.path.abspath(".meritlens-lake"))
        self._stage_move_rows = stage_move_rows
        self._stage_move_s = stage_move_s
        self._max_staged_rows = max_staged_rows
        self._schema = spans_schema()
        self._lock_fd: int | None = None
        self._log: StagingLog | None = None
        self._log_lock = threading.Lock()
        self._changed = threading.Condition()
        self._staged: list[pa.Table] = []
        self._staged_rows = 0
        self._staged_since = 0.0
        self._retry_at = 0.0
        self._closing = False
        self._last_us = 0
        self.segments = 0
        """Segments this writer published since start."""
        self.on_move_demand = None  # set by IngestPipeline; segments are published on their own clock

    @property
    def staging_file(self) -> str:
        return os.path.join(self._local_dir, f"{self.collector_id}.staging")

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Take this collector id on the lake, publish what a previous run left staged, open the log."""
        self.lake.make_dirs()
        os.makedirs(self._local_dir, exist_ok=True)
        lock_path = os.path.join(self._local_dir, f"{self.collector_id}.lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LakeInUse(f"collector id {self.collector_id!r} is in use on {self.lake.root} (another collector"
                            f" holds {lock_path}): give each collector its own --collector-id") from None
        self._lock_fd = fd
        self._take_up_staged()
        self._log = StagingLog(self.staging_file)
        self._log.open()

    def _take_up_staged(self) -> None:
        found = read_staged(self.staging_file)
        if not found.file_bytes:
            return
        if found.tables:
            self._publish(concat(found.tables))
            log.info("published %d spans that the previous run acknowledged in %s",
                     sum(t.num_rows for t in found.tables), self.staging_file)
        if found.torn_bytes:
            aside = set_aside(self.staging_file)
            log.warning("%s ended with %d bytes that are no whole record (never acknowledged); kept as %s",
                        self.staging_file, found.torn_bytes, aside)

    def close_queue(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    def shutdown(self) -> None:
        """Publish what is staged, then release the collector id."""
        self.close_queue()
        published = True
        if self._log is not None:
            try:
                self.move_staged()
            except Exception:  # noqa: BLE001 - the staging log keeps them for the next start
                log.exception("publishing the staged spans at shutdown failed; %s keeps them", self.staging_file)
                published = False
            self._log.close(remove=published)
            self._log = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- writing --------------------------------------------------------------------------------
    def stage(self, table: pa.Table) -> None:
        """Make normalized span rows durable in the staging log (raises when they are not)."""
        with self._changed:
            while self._staged_rows >= self._max_staged_rows:
                if self._retry_at or self._closing:
                    raise RuntimeError(f"{self._staged_rows} staged span rows are waiting for a segment on "
                                       f"{self.lake.root}, the most allowed: publishing fails (see the log)")
                self._changed.wait(1.0)
            self._last_us = max(time.time_ns() // 1000, self._last_us + 1)
            received_us = self._last_us
        rows = stamp_received_at(table, received_us).cast(self._schema)
        with self._log_lock:
            self._log.append(rows)
            with self._changed:
                if not self._staged:
                    self._staged_since = time.monotonic()
                self._staged.append(rows)
                self._staged_rows += rows.num_rows

    def move_due(self) -> float | None:
        with self._changed:
            if not self._staged:
                return None
            now = time.monotonic()
            if now < self._retry_at:
                return self._retry_at - now
            if self._staged_rows >= self._stage_move_rows or self._closing:
                return 0.0
            return max(0.0, self._staged_since + self._stage_move_s - now)

    def move_staged(self) -> int:
        """Publish the staged rows as one segment; returns the rows published. Exports go on being
        staged meanwhile; the log is emptied once it holds nothing unpublished (past
        `LOG_KEEP_BYTES`, what was staged meanwhile is published too, with staging held)."""
        with self._changed:
            staged = list(self._staged)
        if not staged:
            return 0
        published = self._publish_staged(staged)
        with self._log_lock:
            with self._changed:
                rest = list(self._staged)
            if rest:
                if self._log.size <= LOG_KEEP_BYTES:
                    return published  # a restart publishes the kept records again: readers drop the repeats
                published += self._publish_staged(rest)
            self._log.clear()
        return published

    def _publish_staged(self, staged: list[pa.Table]) -> int:
        """Publish the first staged tables (``staged``) and take them out of the staged list."""
        table = concat(staged)
        try:
            self._publish(table)
        except BaseException:
            with self._changed:
                self._retry_at = time.monotonic() + 1.0
                self._changed.notify_all()
            raise
        with self._changed:
            self._staged[:len(staged)] = []
            self._staged_rows -= table.num_rows
            self._retry_at = 0.0
            if self._staged:
                self._staged_since = time.monotonic()
            self._changed.notify_all()
        return table.num_rows

    def _publish(self, table: pa.Table) -> None:
        table = first_of_each_span(table)
        name = unique_stem(f"{self.collector_id}-") + SEGMENT_SUFFIX
        self.lake.publish_parquet(SPANS_DIR, name, table)
        self.segments += 1
        log.debug("published %s (%d spans)", name, table.num_rows)

    def staged_rows(self) -> int:
        with self._changed:
            return self._staged_rows
