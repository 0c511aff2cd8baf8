"""The span archive: spans past the retention horizon, moved out of DuckDB into Parquet segments in the
lake layout (``ARCHIVE/spans/archive-<after µs>-<until µs>.parquet``, zstd), and the one `spans` that
readers see over both.

A move writes the spans received in (archived_until, until] as one segment, durably, then in one DuckDB
transaction advances `span_archive.archived_until` and deletes those rows (`SpanStore.move_to_archive`).
Readers take only the segments up to the watermark their snapshot holds, so a crash between the two
steps leaves a segment no reader sees (removed at the next start) and never a span seen twice.

Each reader's connection gets two temporary views, bound inside its transaction (`bind_spans`):
`spans` (DuckDB's rows, then the archive's) and `spans_hot` (DuckDB's rows only: what a query that must
not read the archive uses). The archive is also a lake: `meritlens sql --lake ARCHIVE` reads it alone.

A forget of archived spans records their keys in `span_forget_pending` in the transaction that deletes
the hot rows and updates the windows, then rewrites the segments holding them and clears the record
(`finish_forgets`; a start finishes one a crash cut short). While the record holds spans, `spans` leaves
them out (an anti join, bound only then: it reads the archive's key columns), so no reader sees them from that
commit on, whichever segments are rewritten yet.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import logging
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from meritlens.analytics.engine import SPANS_TABLE
from meritlens.collector._settings import ARCHIVE_OFF
from meritlens.collector.store._database import timestamp_sql

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

log = logging.getLogger("meritlens.collector.store")

ARCHIVE_TABLE = "span_archive"
ARCHIVE_DDL = (f"CREATE TABLE IF NOT EXISTS {ARCHIVE_TABLE} (archived_until TIMESTAMPTZ NOT NULL,"
               " spans_moved BIGINT NOT NULL, location VARCHAR)")
"""One row: every span received up to ``archived_until`` left DuckDB (``spans_moved`` of them, in
all), to the archive at ``location`` ('none': dropped)."""
FORGET_TABLE = "span_forget_pending"
FORGET_DDL = (f"CREATE TABLE IF NOT EXISTS {FORGET_TABLE} (trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL,"
              " received_at TIMESTAMPTZ NOT NULL)")
"""Archived spans a forget removed whose segments may still hold them (`finish_forgets`)."""
HOT_SPANS = "spans_hot"
"""The view of the spans still in DuckDB (the last retention horizon's)."""
SEGMENT_BATCH_ROWS = 16_384
"""Rows a move holds in memory at once while it writes a segment (one row group each): a batch of the
benchmark's spans takes ~25 MiB in Arrow; 65,536-row batches pushed a collector at its default
--memory-limit over the limiter's soft limit during each move."""
_ARCHIVED = "__archived_spans"
_SEGMENT = re.compile(r"^archive-(\d{17})-(\d{17})\.parquet$")


class ArchiveError(ValueError):
    """The archive given does not fit the file's: the message says which to give."""


class RecomputeRefused(RuntimeError):
    """A recomputation from the spans would leave out spans that were dropped (--archive none)."""

    def __init__(self, what: str, state: ArchiveState):
        super().__init__(
            f"{what} is refused: the spans received up to {_iso(state.archived_until_us)} were dropped"
            " (--archive none), so windows recomputed from the spans left would silently shrink")


@dataclass(frozen=True)
class Segment:
    after_us: int
    """Its spans were received after this time (µs since the epoch) ..."""
    until_us: int
    """... and up to this one."""
    path: str


@dataclass(frozen=True)
class ArchiveState:
    """The `span_archive` row: what left DuckDB and where it went."""

    archived_until_us: int
    spans_moved: int
    location: str | None

    @property
    def dropped(self) -> bool:
        """Spans left DuckDB with no archive to read them back from."""
        return self.archived_until_us > 0 and self.location == ARCHIVE_OFF


def _iso(us: int) -> str:
    return _dt.datetime.fromtimestamp(us / 1e6, _dt.UTC).isoformat(timespec="seconds")


def read_state(con: duckdb.DuckDBPyConnection) -> ArchiveState:
    """The file's archive row (a file that never moved a span: nothing archived)."""
    try:
        rows = con.execute(f"SELECT epoch_us(archived_until), spans_moved, location FROM {ARCHIVE_TABLE}").fetchall()
    except duckdb.CatalogException:  # a file no retention ever touched
        rows = []
    return ArchiveState(*rows[0]) if rows else ArchiveState(0, 0, None)


def create_state(con: duckdb.DuckDBPyConnection, location: str | None) -> ArchiveState:
    """Create the archive row, recording ``location`` (a path, a URI, 'none'; None: keep what is
    recorded). Raises ArchiveError when spans moved to another location already."""
    con.execute(ARCHIVE_DDL)
    con.execute(FORGET_DDL)
    state = read_state(con)
    if not con.execute(f"SELECT count(*) FROM {ARCHIVE_TABLE}").fetchall()[0][0]:
        con.execute(f"INSERT INTO {ARCHIVE_TABLE} VALUES (make_timestamptz(0::BIGINT), 0, ?)", [location])
        return ArchiveState(0, 0, location)
    if location is None or location == state.location:
        return state
    if state.archived_until_us and state.location is not None:
        where = "were dropped (--archive none)" if state.location == ARCHIVE_OFF else f"are in {state.location}"
        raise ArchiveError(f"the spans this file moved out {where}; give --archive {state.location}")
    con.execute(f"UPDATE {ARCHIVE_TABLE} SET location = ?", [location])
    return ArchiveState(state.archived_until_us, state.spans_moved, location)


class SpanArchive:
    """The segments of one archive (a directory or a pyarrow filesystem URI)."""

    def __init__(self, location: str):
        # imported on use: the lake package imports the window engine, which imports the store, and a
        # query of a file that has no archive loads no Arrow
        from meritlens.collector.lake._layout import SPANS_DIR, Lake, spans_schema

        self.lake = Lake(location)
        self.location = location
        self._dir = SPANS_DIR
        self._schema = spans_schema()

    def make_dirs(self) -> None:
        self.lake.fs.create_dir(self.lake.path(self._dir), recursive=True)

    def segments(self, until_us: int | None = None) -> list[Segment]:
        """The archive's segments, oldest first; with ``until_us``, only those up to it."""
        found = []
        for path in self.lake.files(self._dir):
            match = _SEGMENT.match(path.rsplit("/", 1)[-1])
            if match:
                segment = Segment(int(match.group(1)), int(match.group(2)), path)
                if until_us is None or segment.until_us <= until_us:
                    found.append(segment)
        return sorted(found, key=lambda s: s.after_us)

    def write(self, after_us: int, until_us: int, batches) -> str:
        """Publish the spans received in (after_us, until_us] (Arrow record batches) as one segment,
        durable on return."""
        return self.write_named(f"archive-{after_us:017d}-{until_us:017d}.parquet", batches)

    def write_named(self, name: str, batches) -> str:
        """`write` of the segment file ``name``, replacing it whole."""
        batches = (b.cast(self._schema) for b in batches if b.num_rows)
        return self.lake.publish_batches(self._dir, name, self._schema, batches)

    def keys(self, until_us: int):
        """(span keys, after µs, until µs) of each segment up to ``until_us``, oldest first: trace_id,
        span_id and task_id in Arrow tables of a bounded number of rows."""
        import pyarrow as pa
        import pyarrow.dataset as pads

        for segment in self.segments(until_us):
            dataset = pads.dataset(segment.path, schema=self._schema, format="parquet", filesystem=self.lake.fs)
            for batch in dataset.to_batches(columns=["trace_id", "span_id", "task_id"]):
                if batch.num_rows:
                    yield pa.Table.from_batches([batch]), segment.after_us, segment.until_us

    def remove_beyond(self, until_us: int) -> int:
        """Delete the segments past the watermark, and files a write cut short left (a move that did
        not commit); returns how many segments."""
        for path in self.lake.hidden_files(self._dir):
            self.lake.delete(path)
        beyond = [s for s in self.segments() if s.until_us > until_us]
        for segment in beyond:
            self.lake.delete(segment.path)
        if beyond:
            log.info("removed %d archive segments past the archive's watermark (a move that did not commit)",
                     len(beyond))
        return len(beyond)

    def dataset(self, until_us: int) -> pads.Dataset | pa.Table:
        """The archived spans up to ``until_us``, as Arrow hands them to DuckDB."""
        import pyarrow.dataset as pads

        paths = [s.path for s in self.segments(until_us)]
        if not paths:
            return self._schema.empty_table()
        return pads.dataset(paths, schema=self._schema, format="parquet", filesystem=self.lake.fs)

    def rewrite_without(self, matches: Callable[[pa.Table], pa.Array], until_us: int | None = None,
                        received_us: Collection[int] | None = None) -> int:
        """Rewrite every segment holding spans for which ``matches`` (a table's rows -> a boolean
        array) is true, without them; each segment is replaced whole and atomically, read and written a
        batch at a time. With ``received_us`` (the spans' receive times), only the segments holding one of
        them are read. Returns the spans removed."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.dataset as pads

        def hits(batch: pa.RecordBatch) -> pa.Array:
            return pc.fill_null(matches(pa.Table.from_batches([batch])), False)

        times = sorted(received_us) if received_us is not None else None
        removed = 0
        for segment in self.segments(until_us):
            if times is not None:
                first = bisect.bisect_right(times, segment.after_us)
                if first == len(times) or times[first] > segment.until_us:
                    continue
            dataset = pads.dataset(segment.path, schema=self._schema, format="parquet", filesystem=self.lake.fs)
            count = sum(pc.sum(hits(b)).as_py() or 0 for b in dataset.to_batches(batch_size=SEGMENT_BATCH_ROWS))
            if not count:
                continue
            kept = (b.filter(pc.invert(hits(b))) for b in dataset.to_batches(batch_size=SEGMENT_BATCH_ROWS))
            self.write_named(segment.path.rsplit("/", 1)[-1], kept)
            removed += count
        return removed


def finish_forgets(cursor: duckdb.DuckDBPyConnection, archive: SpanArchive | None,
                   rebind: Callable[[], None]) -> int:
    """Rewrite the segments holding the spans `FORGET_TABLE` records without them, clear the record, then
    ``rebind`` the long-lived connections' views (to the rewritten files, without the record's condition);
    returns the spans taken out of segments. Rewriting a segment again finds nothing, so a crash anywhere in it
    leaves the record for the next start to finish."""
    import pyarrow.compute as pc

    pending = cursor.sql(f"SELECT trace_id, span_id, epoch_us(received_at) AS us FROM {FORGET_TABLE}"
                         ).to_arrow_table()
    if not pending.num_rows:
        return 0
    removed = 0
    if archive is not None:
        wanted = _span_keys(pending)
        removed = archive.rewrite_without(lambda t: pc.is_in(_span_keys(t), value_set=wanted),
                                          received_us=set(pending.column("us").to_pylist()))
    cursor.execute(f"DELETE FROM {FORGET_TABLE}")
    rebind()
    return removed


def _span_keys(table: pa.Table) -> pa.Array:
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(table.column("trace_id"), table.column("span_id"), "/").combine_chunks()


def open_archive(state: ArchiveState) -> SpanArchive | None:
    """The archive recorded in the file's row; None when spans were dropped or never moved anywhere."""
    if state.location is None or state.location == ARCHIVE_OFF:
        return None
    return SpanArchive(state.location)


def physical_spans(cursor: duckdb.DuckDBPyConnection) -> str:
    """The span table of ``cursor``'s default database, named so that no temporary view shadows it."""
    catalog = cursor.execute("SELECT current_database()").fetchall()[0][0]
    return '"' + catalog.replace('"', '""') + f'".main.{SPANS_TABLE}'


def bind_spans(cursor: duckdb.DuckDBPyConnection, archive: SpanArchive | None,
               physical: str | None = None) -> ArchiveState:
    """Give ``cursor`` the views `spans` (DuckDB's rows and the archive's up to the watermark that
    ``cursor``'s snapshot holds) and `spans_hot`. Inside a transaction the watermark read here pins
    the snapshot, and every segment up to it was durable before it committed."""
    physical = physical or physical_spans(cursor)
    state = read_state(cursor)
    cursor.execute(f"CREATE OR REPLACE TEMP VIEW {HOT_SPANS} AS SELECT * FROM {physical}")
    if archive is None or not state.archived_until_us:  # `spans` is the table itself
        return state
    columns = cursor.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?"
                             " AND database_name = current_database() AND schema_name = 'main' ORDER BY column_index",
                             [SPANS_TABLE]).fetchall()
    casts = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in columns)
    cursor.register(_ARCHIVED, archive.dataset(state.archived_until_us))
    cursor.execute(f"CREATE OR REPLACE TEMP VIEW {SPANS_TABLE} AS SELECT * FROM {physical} UNION ALL"
                   f" SELECT {casts} FROM {_ARCHIVED} WHERE received_at <= {timestamp_sql(state.archived_until_us)}"
                   f"{_not_forgotten(cursor, physical)}")
    return state


def _not_forgotten(cursor: duckdb.DuckDBPyConnection, physical: str) -> str:
    """The condition leaving out the archived spans a forget removed whose segments are not rewritten yet; none
    while there are none (it costs a scan of the archive's key columns), or on a file no forget touched."""
    if not cursor.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND schema_name = 'main'"
                          " AND database_name = current_database()", [FORGET_TABLE]).fetchall()[0][0]:
        return ""
    pending = physical.rsplit(".", 1)[0] + "." + FORGET_TABLE
    if not cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {pending})").fetchall()[0][0]:
        return ""
    return (f" AND NOT EXISTS (SELECT 1 FROM {pending} f WHERE f.trace_id = {_ARCHIVED}.trace_id"
            f" AND f.span_id = {_ARCHIVED}.span_id)")


def bind_recorded_archive(cursor: duckdb.DuckDBPyConnection) -> None:
    """`bind_spans` with the archive the file records (a reader of the file alone)."""
    bind_spans(cursor, open_archive(read_state(cursor)))
