"""A collector's span sink on a lake: acknowledged exports go to a local staging log, then into
immutable Parquet segments under ``PATH/spans/``.

The same durability rule as the DuckDB store: an export is answered only once its rows are forced to
the staging log (`meritlens.collector.store._stager`, the same component); about once a second, or when
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

import pyarrow as pa

from meritlens.collector._settings import DEFAULT_STAGE_MOVE_ROWS, DEFAULT_STAGE_MOVE_S, DEFAULT_WINDOW_LAG_ROWS
from meritlens.collector.lake._layout import COLLECTORS_DIR, SEGMENT_SUFFIX, SPANS_DIR, Lake, spans_schema, unique_stem
from meritlens.collector.store._rows import CommitClock, first_of_each_span, stamp_received_at
from meritlens.collector.store._stager import Stager, take_up

log = logging.getLogger("meritlens.collector.lake")

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
        self._schema = spans_schema()
        self._lock_fd: int | None = None
        self._clock = CommitClock()
        self._stager = Stager(os.path.join(self._local_dir, f"{self.collector_id}.staging"),
                              place=f"for a segment on {lake.root}", move_rows=stage_move_rows, move_s=stage_move_s,
                              max_rows=max_staged_rows)
        self.segments = 0
        """Segments this writer published since start."""

    @property
    def staging_file(self) -> str:
        return self._stager.path

    @property
    def on_move_demand(self):
        """Set by IngestPipeline; segments are published on their own clock, a waiting reader only hastens them."""
        return self._stager.on_move_demand

    @on_move_demand.setter
    def on_move_demand(self, callback) -> None:
        self._stager.on_move_demand = callback

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

        def publish(table: pa.Table) -> str:
            self._publish(table)
            return f"published {table.num_rows} spans"

        take_up(self.staging_file, publish, set_aside_failure=False)
        self._stager.open()

    def close_queue(self) -> None:
        self._stager.close_queue()

    def shutdown(self) -> None:
        """Publish what is staged, then release the collector id."""
        self.close_queue()
        if self._lock_fd is None:
            return
        self._stager.close(remove=self._stager.move_at_shutdown(self._publish_moved))
        os.close(self._lock_fd)
        self._lock_fd = None

    # --- writing --------------------------------------------------------------------------------
    def stage(self, table: pa.Table) -> None:
        """Make normalized span rows durable in the staging log (raises when they are not)."""
        self._stager.stage(stamp_received_at(table, self._clock.next()).cast(self._schema))

    def move_due(self) -> float | None:
        return self._stager.move_due()

    def move_staged(self) -> int:
        """Publish the staged rows as one segment; returns the rows published. Exports go on being
        staged meanwhile (`Stager.move`)."""
        return self._stager.move(self._publish_moved)

    def _publish_moved(self, table: pa.Table, taken) -> None:
        self._publish(table)
        with self._stager.changed:
            taken()

    def _publish(self, table: pa.Table) -> None:
        table = first_of_each_span(table)
        name = unique_stem(f"{self.collector_id}-") + SEGMENT_SUFFIX
        self.lake.publish_parquet(SPANS_DIR, name, table)
        self.segments += 1
        log.debug("published %s (%d spans)", name, table.num_rows)

    def staged_rows(self) -> int:
        return self._stager.rows()
