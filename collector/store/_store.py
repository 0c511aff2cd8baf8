"""The span store: span rows in a DuckDB file, appended idempotently, read with read-only queries.

`spans` has no B-tree index (DuckDB holds one whole in memory, growing with every span until the
memory limit fails a commit). The table stays in commit order (`received_at`), and a `KeyLocator`
of bounded size says which commit-time ranges may hold a key; DuckDB reads such a range through
its min/max pruning. That makes retried exports idempotent without an index, and lets the window
processor read the stored spans of a trace or task back.

Every committed batch is handed to ``on_commit`` (the window processor, `meritlens.collector.windows`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from meritlens.analytics.engine import SPANS_TABLE, WINDOW_COLUMN_NAMES, WINDOW_INPUT_COLUMNS, WINDOWS_TABLE
from meritlens.collector._settings import (
    DEFAULT_CHECKPOINT_WAL_BYTES,
    DEFAULT_SPAN_INDEX_BYTES,
    DEFAULT_STAGE_MOVE_ROWS,
    DEFAULT_STAGE_MOVE_S,
    DEFAULT_WINDOW_LAG_ROWS,
    ROW_GROUP_ROWS,
)
from meritlens.collector.store._archive import (
    ARCHIVE_TABLE,
    SEGMENT_BATCH_ROWS,
    ArchiveState,
    bind_spans,
    create_state,
    finish_forgets,
    open_archive,
    physical_spans,
    read_state,
)
from meritlens.collector.store._database import (
    Database,
    DatabaseOptions,
    checkpoint_now,
    count,
    timestamp_sql,
    transaction,
)
from meritlens.collector.store._keyfilter import KeyLocator
from meritlens.collector.store._keyhash import key_hashes
from meritlens.collector.store._results import QueryResult
from meritlens.collector.store._rows import (
    CommitClock,
    first_of_each_span,
    ranges_sql,
    row_key_hashes,
    stamp_received_at,
)
from meritlens.collector.store._sqlguard import ArrowQuery, check_read_only, run_read_only
from meritlens.collector.store._stager import Stager, remove_log, take_up
from meritlens.collector.store._staging import staging_path

if TYPE_CHECKING:
    from meritlens.analytics.engine import CoverageReport

log = logging.getLogger("meritlens.collector.store")

@dataclass(frozen=True)
class WriteResult:
    received: int
    inserted: int

    @property
    def duplicates(self) -> int:
        return self.received - self.inserted


@dataclass(frozen=True)
class CommittedBatch:
    """A batch of span rows as committed: what the window processor is handed."""

    table: pa.Table
    """Its rows' `WINDOW_INPUT_COLUMNS` (repeats of a span within the batch removed)."""
    keys: pa.Table
    """The rows' `key_hashes` columns, in the same order."""
    received_us: int
    """Its commit time (µs since the epoch), later than every earlier batch's."""
    follow: bool
    """False for bulk loads: their windows are rebuilt by the loader."""
    seq: int
    """Its place among the batches committed since start (1, 2, ...)."""


class SpanStore:
    """A DuckDB file holding `spans` (and the tables the analytics write). One span writer; readers
    use their own cursors.

    ``memory_limit_bytes`` caps DuckDB's buffer pool (None: DuckDB's default, 80% of RAM).
    ``span_index_bytes`` bounds the `KeyLocator` that finds stored keys. With ``staging``, `stage`
    makes batches durable in a log next to the file and a later `move_staged` commits them in one
    INSERT (`Stager`); `append` commits at once. ``archive``: where `move_to_archive` moves spans (a
    directory or URI, 'none' to drop them; None: where this file's earlier moves went). Every reader sees
    one `spans` over DuckDB and the archive (`_archive`)."""

    def __init__(self, path: str, *, read_only: bool = False, memory_limit_bytes: int | None = None,
                 db_threads: int | None = None, checkpoint_wal_bytes: int = DEFAULT_CHECKPOINT_WAL_BYTES,
                 span_index_bytes: int = DEFAULT_SPAN_INDEX_BYTES, staging: bool = False,
                 stage_move_rows: int = DEFAULT_STAGE_MOVE_ROWS, stage_move_s: float = DEFAULT_STAGE_MOVE_S,
                 max_staged_rows: int = DEFAULT_WINDOW_LAG_ROWS, row_group_rows: int = ROW_GROUP_ROWS,
                 archive: str | None = None):
        self.path = path
        self._archive_location = archive
        self.archive_state = ArchiveState(0, 0, None)
        self.archive = None
        """The `SpanArchive` that moved spans are read back from (None: none)."""
        self._physical = SPANS_TABLE
        """The span table itself (a temporary view `spans` over it and the archive shadows it)."""
        self._bound: list[duckdb.DuckDBPyConnection] = []
        """Connections whose views `spans` follow every move (the span writer's, the window processor's)."""
        self.archive_lock = threading.Lock()
        """Held by a move and by a forget from its deletion to its segments' rewrite: they never interleave."""
        self.move_guard: AbstractContextManager = contextlib.nullcontext()
        """Held while a move commits (the window processor's lock: no pass reads spans meanwhile)."""
        self.moved = 0
        """Spans moved out of DuckDB since start."""
        self.read_only = read_only
        self.memory_limit_bytes = memory_limit_bytes
        self._options = DatabaseOptions(memory_limit_bytes, db_threads, checkpoint_wal_bytes, row_group_rows)
        self._staging = staging and path != ":memory:" and not read_only
        self._stager = Stager(staging_path(path), place=f"to be stored in {path}", move_rows=stage_move_rows,
                              move_s=stage_move_s, max_rows=max_staged_rows, row_group_rows=row_group_rows)
        self._db: Database | None = None
        self._span_cursor: duckdb.DuckDBPyConnection | None = None
        self._reader: duckdb.DuckDBPyConnection | None = None
        self._reader_lock = threading.Lock()
        self._span_lock = threading.Lock()
        """Serializes span inserts (on ``_span_cursor``)."""
        self.write_lock = threading.RLock()
        """Serializes the writers of the other tables (windows, experiments, coverage) on ``_db.con``."""
        self._changed = self._stager.changed
        """Guards the staging counts and the commit count, which change together."""
        self.commits = 0
        """Batches committed since start."""
        self.stored_rows = 0
        """Spans in the file (counted at start, then what each append inserted and each move took out)."""
        self.inserted = 0
        """Spans inserted since start."""
        self._clock = CommitClock()
        self.held_spans_at_start = False
        self._locator = KeyLocator(span_index_bytes)
        self._locator_lock = threading.Lock()
        """The span writer adds to the locator while the window processor reads it."""
        self.on_commit: Callable[[CommittedBatch], None] | None = None
        """Called, in commit order, with every batch committed after `start`."""
        self.before_commit: Callable[[], None] | None = None
        """Called before a waiting append commits (the window processor waits there while it lags)."""
        self.freshness: Callable[[float], bool] | None = None
        """Called with ``query_wait_s`` before a query: waits until the windows include what was
        acknowledged before it, and says whether they do (the window processor)."""
        self.stats = {"duplicate_checks": 0}

    @property
    def on_move_demand(self) -> Callable[[], None] | None:
        """Called (from a reader's thread) when a query waits for staged rows: the mover should move
        them now (`IngestPipeline` wakes its mover)."""
        return self._stager.on_move_demand

    @on_move_demand.setter
    def on_move_demand(self, callback: Callable[[], None] | None) -> None:
        self._stager.on_move_demand = callback

    @property
    def db_name(self) -> str:
        return os.path.basename(self.path)

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the file; raises `ArchiveError` when ``archive`` is not where its spans moved."""
        self._db = Database(self.path, self._options, read_only=self.read_only)
        if not self.read_only:
            self._db.create_tables()
            self.archive_state = create_state(self._db.con, self._archive_location)
        else:
            self.archive_state = read_state(self._db.con)
        self.archive = open_archive(self.archive_state)
        self._physical = physical_spans(self._db.con)
        self._reader = self._db.cursor()
        if self.read_only:
            return
        if self.archive is not None:
            self.archive.make_dirs()
            self.archive.remove_beyond(self.archive_state.archived_until_us)
        if removed := self.finish_forgets():
            log.info("took %d forgotten spans out of the archive's segments (a forget cut short)", removed)
        self._span_cursor = self._bound_cursor()
        self._clock.last = max(self._max_received_us(), self.archive_state.archived_until_us)
        self._fill_locator()
        self._take_up_staged()
        last, self.stored_rows = self._db.con.execute(
            f"SELECT coalesce(max(epoch_us(received_at)), 0), count(*) FROM {SPANS_TABLE}").fetchall()[0]
        self._clock.last = max(last, self.archive_state.archived_until_us)
        self.held_spans_at_start = self.stored_rows > 0 or self.archive_state.archived_until_us > 0
        if self._staging:
            self._stager.open()

    def shutdown(self) -> None:
        """Store what is staged, checkpoint and close. Stop the window processor first."""
        if self._db is None:
            return
        self.close_queue()
        moved = not self._staging or self._stager.move_at_shutdown(self._store_moved)
        for cursor in (self._span_cursor, self._reader, *self._bound):
            if cursor is not None:
                cursor.close()
        self._bound = []
        self._db.close(checkpoint=True)
        self._stager.close(remove=moved)
        self._db = self._span_cursor = self._reader = None

    def connection(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to the store's database (the window processor's), whose `spans`
        follows every move (`move_to_archive`)."""
        if self._db is None:
            raise RuntimeError("the store is not started")
        return self._bound_cursor()

    def _bound_cursor(self) -> duckdb.DuckDBPyConnection:
        cursor = self._db.cursor()
        try:
            bind_spans(cursor, self.archive, self._physical)
        except BaseException:
            cursor.close()
            raise
        self._bound.append(cursor)
        return cursor

    def close_queue(self) -> None:
        """Wake every waiter: a shutdown is under way (writers stop waiting)."""
        self._stager.close_queue()

    def _max_received_us(self) -> int:
        return int(self._db.con.execute(f"SELECT coalesce(max(epoch_us(received_at)), 0) FROM {SPANS_TABLE}"
                                        ).fetchall()[0][0])

    def _fill_locator(self) -> None:
        """Put every stored span's keys in the locator, in commit order: the archive's, then DuckDB's
        (so that a retried export of a moved span is known after a restart)."""
        self._locator.clear()
        if self.archive is not None:
            for table, after_us, until_us in self.archive.keys(self.archive_state.archived_until_us):
                keys = key_hashes(table)
                self._locator.add(row_key_hashes(keys), after_us + 1, until_us, gated=keys.column("s").to_numpy())
        reader = self._db.con.sql(
            f"SELECT trace_id, span_id, task_id, epoch_us(received_at) AS us FROM {SPANS_TABLE}"
        ).to_arrow_reader(50_000)
        for batch in reader:
            us = batch.column(3).to_numpy()
            keys = key_hashes(pa.Table.from_batches([batch]))
            self._locator.add(row_key_hashes(keys), int(us.min()), int(us.max()), gated=keys.column("s").to_numpy())

    def _take_up_staged(self) -> None:
        """Commit what a previous process acknowledged into its staging log but did not move (it
        stopped without a clean shutdown). They count as spans it committed: the window processor
        follows them when it opens, as it follows spans a crashed process committed."""

        def store(table: pa.Table) -> str:
            result = self._append(table, follow=False, wait=False, announce=False)
            return f"stored {result.inserted} spans ({result.duplicates} already stored)"

        take_up(staging_path(self.path), store, set_aside_failure=True)
        if not self._staging:
            remove_log(staging_path(self.path))

    # --- writing spans --------------------------------------------------------------------------
    def append(self, table: pa.Table, *, follow: bool = True, wait: bool = True) -> WriteResult:
        """Insert span rows, ignoring any (trace_id, span_id) already stored, and commit; then hand
        the batch to ``on_commit``. With ``wait``, first wait in ``before_commit`` (the window
        processor's lag bound). ``follow=False`` (bulk loads): the windows are rebuilt afterwards."""
        return self._append(table, follow=follow, wait=wait)

    def stage(self, table: pa.Table) -> None:
        """Make span rows durable in the staging log; they are committed in DuckDB by a later
        `move_staged` (another thread's, when `move_due` says so), together with the batches staged
        after them. A store without staging appends them at once. Raises when they are not durable."""
        if not self._staging:
            self.append(table)
            return
        self._stager.stage(table)

    def move_due(self) -> float | None:
        """Seconds until the staged rows should be moved (0: now), or None when none are staged."""
        return self._stager.move_due()

    def move_staged(self) -> int:
        """Commit the staged rows in one INSERT (see `append`), then empty the staging log; returns
        the rows moved. Every staged row is moved when a query waits for them, the store is closing,
        or the oldest has waited ``stage_move_s``; otherwise only whole row groups of them, in
        staging order: DuckDB writes those to the file compressed at once, and the rest would wait
        uncompressed in its memory until a checkpoint (`Stager.move`)."""
        return self._stager.move(self._store_moved)

    def _store_moved(self, table: pa.Table, taken: Callable[[], None]) -> None:
        self._append(table, follow=True, wait=True, taken=taken)

    def _append(self, table: pa.Table, *, follow: bool, wait: bool, announce: bool = True,
                taken: Callable[[], None] | None = None) -> WriteResult:
        """`append`; ``announce=False`` hands the batch to no one (spans committed before the window
        processor opens, which it takes up then); ``taken``: the batch holds staged rows, which stop
        counting as staged in the step where the batch counts as committed (so a waiting query
        cannot miss them)."""
        if self._span_cursor is None:
            raise RuntimeError("the store is not started, or was opened read-only")
        received = table.num_rows
        with self._span_lock:
            if wait and self.before_commit is not None:
                self.before_commit()
            received_us = self._clock.next()
            table = stamp_received_at(table, received_us)
            keys = key_hashes(table)
            first = first_of_each_span(table, keys.column("s").to_numpy())
            if first is not table:  # a span was repeated in the batch
                table, keys = first, key_hashes(first)
            inserted = self._insert_new(table, keys)
            with self._locator_lock:
                self._locator.add(row_key_hashes(keys), received_us, gated=keys.column("s").to_numpy())
            with self._changed:
                self.commits += 1
                if taken is not None:
                    taken()
                self.stored_rows += inserted
                self.inserted += inserted
                seq = self.commits
                self._changed.notify_all()
            if announce and self.on_commit is not None:
                self.on_commit(CommittedBatch(table.select(_WINDOW_INPUT), keys, received_us, follow, seq))
        return WriteResult(received=received, inserted=inserted)

    def _insert_new(self, table: pa.Table, keys: pa.Table) -> int:
        """Insert the rows whose (trace_id, span_id) is not stored yet; return how many."""
        cursor = self._span_cursor
        with self._locator_lock:
            stored = self._locator.ranges(keys.column("s").to_numpy())
        if not stored:  # no span may be stored: a relation over the batch, no count to read back
            cursor.from_arrow(table).insert_into(self._physical)
            return table.num_rows
        self.stats["duplicate_checks"] += 1  # some may be (a retried export, moved or not): leave those out
        cursor.register("_incoming", table)
        try:
            return count(cursor.execute(
                f"INSERT INTO {self._physical} SELECT * FROM _incoming i WHERE NOT EXISTS ("
                f"SELECT 1 FROM ({ranges_sql(stored)}) s WHERE s.trace_id = i.trace_id AND s.span_id = i.span_id)"))
        finally:
            cursor.unregister("_incoming")

    @property
    def last_received_us(self) -> int:
        """The latest commit time (µs since the epoch): the windows' watermark orders batches by it."""
        return self._clock.last

    def ranges(self, hashes: np.ndarray, until_us: int | None = None, *, gated: bool = True) -> list[tuple[int, int]]:
        """The commit-time ranges that may hold rows with any of these key hashes (`KeyLocator.ranges`)."""
        with self._locator_lock:
            return self._locator.ranges(hashes, until_us, gated=gated)

    # --- retention -----------------------------------------------------------------------------------
    def move_to_archive(self, horizon_us: int, max_rows: int) -> int:
        """Move the oldest spans received up to ``horizon_us`` (about ``max_rows`` of them, whole
        commits) out of DuckDB: written to the archive as one durable segment (none with 'none'), then,
        in one transaction, the watermark advanced and their rows deleted. Returns the spans moved."""
        with self.archive_lock:
            cursor, after_us = self._db.cursor(), self.archive_state.archived_until_us
            try:
                until_us = cursor.execute(
                    f"SELECT epoch_us(max(received_at)) FROM (SELECT received_at FROM {self._physical} WHERE"
                    f" received_at > {timestamp_sql(after_us)} AND received_at <= {timestamp_sql(horizon_us)}"
                    f" ORDER BY received_at LIMIT {int(max_rows)})").fetchall()[0][0]
                if until_us is None:
                    return 0
                moving = (f"{self._physical} WHERE received_at > {timestamp_sql(after_us)}"
                          f" AND received_at <= {timestamp_sql(until_us)}")
                if self.archive is not None:  # a segment a failed move left would overlap this one
                    self.archive.remove_beyond(after_us)
                    rows = cursor.sql(f"SELECT * FROM {moving}").to_arrow_reader(SEGMENT_BATCH_ROWS)
                    self.archive.write(after_us, until_us, rows)
                with self._span_lock, self.move_guard:
                    with transaction(cursor):
                        moved = count(cursor.execute(f"DELETE FROM {moving}"))
                        cursor.execute(f"UPDATE {ARCHIVE_TABLE} SET archived_until = {timestamp_sql(until_us)},"
                                       f" spans_moved = spans_moved + {moved}")
                    state = self.archive_state
                    self.archive_state = ArchiveState(until_us, state.spans_moved + moved, state.location)
                    self._rebind()
                    with self._changed:
                        self.stored_rows -= moved
                        self.moved += moved
                checkpoint_now(cursor)
                return moved
            finally:
                cursor.close()

    def finish_forgets(self) -> int:
        """`_archive.finish_forgets` on this file (call with `archive_lock` held, or at start)."""
        def rebind() -> None:
            with self._span_lock, self.move_guard:
                self._rebind()

        with self._db.cursor() as cursor:
            return finish_forgets(cursor, self.archive, rebind)

    def _rebind(self) -> None:
        """Point every bound connection's `spans` at the archive as it is now (a closed one is let go)."""
        for cursor in list(self._bound):
            try:
                bind_spans(cursor, self.archive, self._physical)
            except duckdb.Error:
                self._bound.remove(cursor)

    # --- waiting for what was acknowledged ----------------------------------------------------------
    def wait_committed(self, timeout: float | None) -> int | None:
        """Wait until every row staged before the call is committed; return the commit count then
        (None on timeout). A waiting reader makes the mover move every staged row at once."""
        with self._changed:
            return self.commits if self._stager.wait_moved(timeout) else None

    @property
    def readers_waiting(self) -> bool:
        return self._stager.readers_waiting

    def memory_parts(self) -> dict[str, int]:
        """Bytes of the store's parts of the memory budget now: DuckDB's own count of its memory (its
        buffer pool and what its operators hold) and the key locator."""
        cursor = self._open_reader()
        try:
            duckdb_bytes = cursor.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()").fetchall()
        finally:
            cursor.close()
        return {"duckdb": int(duckdb_bytes[0][0]), "key_locator": self._locator.nbytes}

    def staged_rows(self) -> int:
        """Acknowledged span rows in the staging log that DuckDB does not hold yet."""
        return self._stager.rows()

    # --- the other tables -----------------------------------------------------------------------
    def write_experiment(self, manifest, *, create: bool = False):
        """Create or update an experiment manifest (``meritlens.analytics.ExperimentManifest``) in one
        transaction, after ``check_update`` against the stored one; returns it as stored (with its
        created/updated times). Raises ExperimentError for an update that rewrites the past, or with
        ``create`` when the experiment exists."""
        from meritlens.analytics.engine import save_manifest

        with self.write_lock:
            con = self._db.con

            def query(sql: str) -> QueryResult:
                result = con.execute(sql)
                return QueryResult([d[0] for d in result.description], [], result.fetchall())

            with transaction(con):
                return save_manifest(manifest, query, con.execute, create=create)

    def record_coverage(self, report: CoverageReport) -> None:
        """Append a readiness check to `coverage_checks` (the `coverage` view shows the latest)."""
        from meritlens.analytics.engine import coverage_row, record_coverage_sql  # pydantic: on first use

        with self.write_lock:
            self._db.con.execute(record_coverage_sql(), coverage_row(report))

    def write_windows(self, windows: list) -> int:
        """Insert or replace evaluated windows (`meritlens.analytics.Window`) by (target_id, metric,
        scope), all in one transaction; return how many were written."""
        if not windows:
            return 0
        rows = [[getattr(w, name) for name in WINDOW_COLUMN_NAMES] for w in windows]
        with self.write_lock, transaction(self._db.con) as con:
            con.executemany(
                f"INSERT OR REPLACE INTO {WINDOWS_TABLE} ({', '.join(WINDOW_COLUMN_NAMES)}) "
                f"VALUES ({', '.join('?' for _ in WINDOW_COLUMN_NAMES)})", rows)
        return len(windows)

    # --- reading --------------------------------------------------------------------------------
    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float | None = None,
              wait_s: float | None = None) -> QueryResult:
        """Run one read-only statement (see `_sqlguard`); raise ValueError naming what was refused,
        QueryTimeout when it ran past ``timeout_s``; keep at most ``max_rows`` rows. First waits
        (`freshness`) until the windows include every span acknowledged before the call."""
        behind = not self._fresh(wait_s)
        cursor = self._open_reader()
        try:
            result = run_read_only(cursor, sql, max_rows=max_rows, timeout_s=timeout_s, prepare=self._bind_reader)
            return QueryResult(result.columns, result.types, result.rows, result.truncated, behind)
        finally:
            cursor.close()

    def query_arrow(self, sql: str, *, batch_rows: int = 65_536) -> ArrowQuery:
        """Run one read-only statement and stream its result as Arrow record batches.

        Use as a context manager; the reader's batches hold at most ``batch_rows`` rows."""
        check_read_only(sql)
        self._fresh(None)
        cursor = self._open_reader()
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")  # one snapshot, and no writes, while it streams
            self._bind_reader(cursor)
            reader = cursor.sql(sql).to_arrow_reader(batch_rows)
        except BaseException:
            cursor.close()
            raise
        return ArrowQuery(reader, cursor)

    def _bind_reader(self, cursor: duckdb.DuckDBPyConnection) -> None:
        bind_spans(cursor, self.archive, self._physical)

    def _fresh(self, wait_s: float | None) -> bool:
        return True if self.freshness is None else self.freshness(wait_s)

    def _open_reader(self) -> duckdb.DuckDBPyConnection:
        with self._reader_lock:
            if self._reader is None:
                raise RuntimeError("the store is not started")
            return self._db.cursor()


_WINDOW_INPUT = list(WINDOW_INPUT_COLUMNS)
