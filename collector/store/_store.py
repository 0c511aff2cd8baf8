"""The span store: DuckDB behind one small interface.

Write a batch idempotently and update the windows it changes, run a read-only query. A
distributed engine can later stand behind the same calls.

Windows are updated in O(new spans), after the spans are committed and for every batch committed
since the last update at once: the batches' *closure* (the stored spans of every task and trace
they touch, up to the last of them) is read, the samples of that closure are computed before (up
to the windows' watermark) and after, and only the difference is applied to the window accumulators
(`meritlens.analytics._accumulate`). A key filter of bounded size answers "was this trace or task
seen before?" without reading the table, so a batch of new tasks reads nothing back; keys the
filter may have seen are read from the commit-time ranges a `KeyLocator` gives.

No B-tree index is kept on `spans`: DuckDB holds such indexes whole in its memory, so they grow
with every stored span until the memory limit fails a commit (measured: ~170 bytes a span with the
primary key and two key indexes; a 512 MiB limit failed at ~2.9M spans). Instead the table stays in
commit order, and a `KeyLocator` of bounded size says which commit-time ranges may hold a key; DuckDB
reads a range through its min/max pruning. The same locator makes retried exports idempotent: a
batch's spans that may be stored are checked against the ranges that may hold them.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics._accumulate import STATE_PART_BYTES, StateMismatch, WindowBook
from meritlens.analytics._schema import (
    SPAN_COLUMN_NAMES,
    SPANS_TABLE,
    WINDOW_COLUMN_NAMES,
    WINDOW_COLUMNS,
    WINDOW_KEY_COLUMNS,
    WINDOW_STATE_COLUMN_NAMES,
    WINDOW_STATE_TABLE,
    WINDOW_WATERMARK_COLUMN_NAMES,
    WINDOW_WATERMARK_TABLE,
    WINDOWS_TABLE,
)
from meritlens.analytics._views import STORE_DDL
from meritlens.analytics._windows import (
    APPLICATION_SPANS,
    EVIDENCE_MEDIA_TYPE,
    SCOPE_ALL,
    WINDOW_INPUT_COLUMNS,
    sample_rows_sql,
    sql_string,
    window_definitions_digest,
)
from meritlens.collector.store._keyfilter import GrowingKeyFilter, KeyLocator
from meritlens.collector.store._keyhash import key_hashes, string_hashes
from meritlens.collector.process._normalize import _ARROW_TYPES
from meritlens.collector.store._partitions import partition_spans
from meritlens.collector.store._results import QueryResult
from meritlens.collector._settings import (
    DEFAULT_CHECKPOINT_WAL_BYTES,
    DEFAULT_DB_MEMORY_BYTES,
    DEFAULT_KEY_FILTER_BYTES,
    DEFAULT_QUERY_WAIT_S,
    DEFAULT_SPAN_INDEX_BYTES,
    DEFAULT_STAGE_MOVE_ROWS,
    DEFAULT_STAGE_MOVE_S,
    DEFAULT_WINDOW_LAG_ROWS,
    DEFAULT_WINDOW_MEMORY_BYTES,
    MIN_REBUILD_ROWS_PER_PARTITION,
    REBUILD_POOL_BYTES_PER_ROW,
    ROW_GROUP_ROWS,
)
from meritlens.collector.store._sqlguard import LOCKED_DOWN, check_read_only, lock_configuration, run_read_only
from meritlens.collector.store._staging import StagingLog, read_staged, set_aside, staging_path
from meritlens.instrumentation.conventions import ROLE_APPLICATION

if TYPE_CHECKING:
    from meritlens.analytics._readiness import CoverageReport

log = logging.getLogger("meritlens.collector.store")

_CONFIG = {
    **LOCKED_DOWN,  # queries may not touch files, URLs or extensions
}
STAGING_LOG_KEEP_BYTES = 64 * 1024 * 1024
"""Up to this size the staging log keeps records already stored in DuckDB while exports staged during
a move wait in it (a restart stores them again, harmlessly: stored spans are skipped); beyond it a
move also stores those exports, with staging held, and empties the log."""
_OLD_INDEXES = ("spans_trace_id", "spans_task_id")
"""B-tree indexes of earlier versions, dropped at start (see the module docstring)."""
_REBUILD_BATCH_ROWS = 65_536
"""Sample rows per Arrow batch read by a rebuild."""
_REBUILD_TRACES = "_rebuild_traces"
_TARGETED_REBUILD_FRACTION = 0.25
"""A rebuild of targets holding more of the stored spans than this reads every span (see `_few_rows_of`)."""


@dataclass(frozen=True)
class WriteResult:
    received: int
    inserted: int

    @property
    def duplicates(self) -> int:
        return self.received - self.inserted


def _sample_targets(samples: pa.Table | None) -> set[str]:
    return set() if samples is None else set(pc.unique(samples.column("target_id")).to_pylist())


def touched_keys(table: pa.Table) -> set[tuple[str, str]]:
    """The (target_id, scope) window keys that a batch of span rows can change."""
    app = _application_rows(table.select(["role", "target_id", "assessment_id"]))
    keys = {(target, SCOPE_ALL) for target in pc.unique(app.column("target_id")).to_pylist()}
    assessed = app.filter(pc.is_valid(app.column("assessment_id")))
    pairs = assessed.group_by(["target_id", "assessment_id"]).aggregate([])
    keys |= set(zip(pairs.column("target_id").to_pylist(), pairs.column("assessment_id").to_pylist()))
    return keys


class SpanStore:
    """A DuckDB file holding `spans` and `windows`. One writer; readers use their own cursors.

    ``db_memory_bytes`` caps DuckDB's buffer pool (None: DuckDB's default, 80% of RAM).
    ``checkpoint_wal_bytes``: the write-ahead log size at which DuckDB checkpoints the file.
    ``db_threads``: DuckDB's worker threads (None: DuckDB's default, one per core).
    ``span_index_bytes`` bounds the size of the `KeyLocator` that finds stored keys.
    ``key_filter_bytes`` and ``window_memory_bytes`` bound the memory of the window processor:
    the filter of seen trace/task keys grows with its keys up to that size (more keys then only
    cost more lookups),
    and window state beyond the budget is dropped, least recently used first, and rebuilt from
    the spans when its target is written to again.

    Spans and windows are written by two paths: `append` commits spans (the receivers answer
    then), and `update_windows` brings the windows up to date with every committed batch at
    once — a `WindowUpdater` thread runs it in the collector; `write` does both in turn. At most
    ``window_lag_rows`` committed rows wait for the windows (appends wait beyond that), and
    queries wait up to ``query_wait_s`` for the windows to include what was committed before
    them, so a query after an acknowledged export sees its spans in the windows.
    ``rebuild_rows_per_partition`` is how many scoped application rows (see `_partitions`) a window
    rebuild (at start, and for a target whose state was dropped) reads per statement; by default
    the DuckDB memory limit over ``REBUILD_POOL_BYTES_PER_ROW``."""

    def __init__(self, path: str, *, read_only: bool = False, key_filter_bytes: int = DEFAULT_KEY_FILTER_BYTES,
                 span_index_bytes: int = DEFAULT_SPAN_INDEX_BYTES,
                 window_memory_bytes: int = DEFAULT_WINDOW_MEMORY_BYTES, db_memory_bytes: int | None = None,
                 window_lag_rows: int = DEFAULT_WINDOW_LAG_ROWS, query_wait_s: float = DEFAULT_QUERY_WAIT_S,
                 rebuild_rows_per_partition: int | None = None,
                 checkpoint_wal_bytes: int = DEFAULT_CHECKPOINT_WAL_BYTES, db_threads: int | None = None,
                 staging: bool = False, stage_move_rows: int = DEFAULT_STAGE_MOVE_ROWS,
                 stage_move_s: float = DEFAULT_STAGE_MOVE_S, row_group_rows: int = ROW_GROUP_ROWS):
        self.path = path
        self._row_group_rows = row_group_rows
        """Rows per row group of a file the store writes; a multiple of 2048 (DuckDB's vector size)."""
        self._staging = staging and path != ":memory:" and not read_only
        self._stage_move_rows = stage_move_rows
        self._stage_move_s = stage_move_s
        self._log: StagingLog | None = None
        self._staged: list[pa.Table] = []
        self._staged_total = 0
        """Rows staged since start (under ``_changed``). They move in staging order, so the first
        ``_staged_total - _staged_rows`` of them are committed."""
        self._staged_rows = 0
        """Rows acknowledged from the staging log and not yet committed in DuckDB (under ``_changed``)."""
        self._staged_since = 0.0
        self._move_retry_at = 0.0
        """When to try a failed move again; 0 while the last move succeeded (`stage` waits at its
        bound for a working mover, and refuses rows beyond it after a failed one)."""
        self.on_move_demand = None
        """Called (from a reader's thread) when a query waits for staged rows: the stager should
        move them now (`IngestPipeline` wakes its mover)."""
        self._checkpoint_wal_bytes = checkpoint_wal_bytes
        self._db_threads = db_threads
        if rebuild_rows_per_partition is None:
            pool = db_memory_bytes if db_memory_bytes is not None else DEFAULT_DB_MEMORY_BYTES
            rebuild_rows_per_partition = max(MIN_REBUILD_ROWS_PER_PARTITION, pool // REBUILD_POOL_BYTES_PER_ROW)
        self._rebuild_rows_per_partition = rebuild_rows_per_partition
        self._db_memory_bytes = db_memory_bytes
        self.read_only = read_only
        self._con: duckdb.DuckDBPyConnection | None = None
        self._catalog: str | None = None
        """The quoted alias of the attached file, when `_connect` attached it (see `_cursor`)."""
        self._prepared: dict[str, str] = {}
        """Statement names on ``_con`` by SQL text (`_select_arrow`)."""
        self._span_lock = threading.Lock()
        """Serializes span inserts (on ``_span_cursor``)."""
        self._log_lock = threading.Lock()
        """Serializes the staging log's appends and its emptying (`stage`, `move_staged`)."""
        self._log_keep_bytes = STAGING_LOG_KEEP_BYTES
        self._span_cursor: duckdb.DuckDBPyConnection | None = None
        self._window_lock = threading.RLock()
        """Serializes the window processor and the other writers (on ``_con``)."""
        self._changed = threading.Condition()
        """Guards the queue of committed batches the windows do not include yet."""
        self._pending: list[_Stored] = []
        self._pending_rows = 0
        self._window_lag_rows = window_lag_rows
        self._query_wait_s = query_wait_s
        self._stored = 0
        """Batches committed since start."""
        self._windowed = 0
        """Of those, the batches the windows include (they are processed in commit order)."""
        self._windowed_us = 0
        """The windows include every span committed up to this time (µs since the epoch)."""
        self._last_received_us = 0
        self._closing = False
        self._readers_waiting = 0
        self._reader: duckdb.DuckDBPyConnection | None = None
        self._reader_lock = threading.Lock()
        # ~32 bits a key (the default): a wrong "maybe" here costs a read, since the locator's
        # blocks hold the batch's own keys by the time the window pass asks
        self._keys = GrowingKeyFilter(key_filter_bytes)
        self._locator = KeyLocator(span_index_bytes)
        self._locator_lock = threading.Lock()
        """The span writer adds to the locator while the window thread reads it."""
        self._book = WindowBook()
        self._window_memory_bytes = window_memory_bytes
        self._recency: dict[tuple[str, str], int] = {}
        self._writes = 0
        self._evicted: set[str] = set()
        """Targets whose window state was dropped; rebuilt from the spans on their next write."""
        self._digest: str | None = None
        self._windows_opened = False
        """Whether `open_windows` or `refresh_all_windows` ran: only then does the book hold each of
        its targets' whole state (see `_save_window_state`)."""
        self._held_spans_at_start = False
        """Whether the file held spans when this store started. Until the windows are opened, its
        window passes then write nothing (see `update_windows`)."""
        self._stored_rows = 0
        """Spans in the file (counted at start, then what each append inserted)."""
        self._rows_since_state_save = 0
        self._state_saved_at = time.monotonic()
        self._replay_until_us: int | None = None
        """Set at start when the saved window state is older than the stored windows: the window
        thread first brings the state up to this commit time from the stored spans (`_replay`)."""
        self._state_kept_us: int | None = None
        """The watermark of the saved window state taken up at start (its rows are kept)."""
        self._watermark_valid = True
        """Whether the window rows equal a computation from the spans up to ``_windowed_us`` for every
        target, so the watermark may be stored with them. False after a bulk load (its windows wait
        for the loader's rebuild) or a failed rebuild, until `refresh_all_windows`; and from the
        start on a file that held spans, until the windows are opened."""
        self.stats = {"closure_lookups": 0, "closure_keys": 0, "closure_ranges": 0, "rebuilds": 0,
                      "duplicate_checks": 0, "rebuild_partitions": 0, "label_rounds": 0, "resumes": 0,
                      "state_keys_saved": 0, "state_keys_taken_up": 0, "state_saves": 0, "state_replayed_spans": 0}
        """Counters; ``rebuild_partitions`` and ``label_rounds`` describe the last rebuild."""

    @property
    def db_name(self) -> str:
        return os.path.basename(self.path)

    def start(self) -> None:
        self._con = self._connect(self._config())
        self._prepared = {}
        if not self.read_only:
            for statement in STORE_DDL:
                self._con.execute(statement)
            self._drop_old_indexes()
        self._reader, self._span_cursor = self._lock_and_open_cursors(self._con)
        if not self.read_only:
            last = self._con.execute(f"SELECT max(epoch_us(received_at)) FROM {SPANS_TABLE}").fetchall()[0][0]
            self._last_received_us = int(last or 0)
            self._fill_locator()
            self._take_up_staged()
            last, self._stored_rows = self._con.execute(
                f"SELECT max(epoch_us(received_at)), count(*) FROM {SPANS_TABLE}").fetchall()[0]
            self._last_received_us = self._windowed_us = int(last or 0)
            self._held_spans_at_start = last is not None
            self._watermark_valid = not self._held_spans_at_start  # until the windows are opened
            if self._staging:
                self._log = StagingLog(staging_path(self.path))
                self._log.open()

    def _config(self) -> dict:
        config = dict(_CONFIG)
        if self._db_memory_bytes is not None:
            config["memory_limit"] = f"{self._db_memory_bytes // (1024 * 1024)}MiB"
        config["checkpoint_threshold"] = f"{self._checkpoint_wal_bytes}B"
        if self._db_threads is not None:
            config["threads"] = self._db_threads
        return config

    def _lock_and_open_cursors(self, con: duckdb.DuckDBPyConnection):
        """Lock ``con``'s configuration; return the reader's cursor and the span writer's (None
        when read-only)."""
        lock_configuration(con)
        reader = self._cursor(con)
        return reader, None if self.read_only else self._cursor(con)

    def _connect(self, config: dict) -> duckdb.DuckDBPyConnection:
        """The store's connection. A writable file is attached to an in-memory database with
        `ROW_GROUP_SIZE` (which only `ATTACH` takes) and made the default catalog; its connections
        are then made with `_cursor`. A file whose default alias is taken (``memory.duckdb``) is
        opened directly, with DuckDB's row group size."""
        self._catalog = None
        if self.read_only or self.path == ":memory:":
            return duckdb.connect(self.path, read_only=self.read_only, config=config)
        locked = {key: config.pop(key) for key in LOCKED_DOWN if key in config}  # they forbid ATTACH
        con = duckdb.connect(config=config)
        try:
            try:
                con.execute(f"ATTACH {sql_string(self.path)} (ROW_GROUP_SIZE {self._row_group_rows})")
            except duckdb.BinderException:
                con.close()  # the file's alias is "memory" (or another built-in name)
                return duckdb.connect(self.path, config={**config, **locked})
            alias = con.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal"
                                " AND database_name <> 'memory'").fetchall()[0][0]
            self._catalog = '"' + alias.replace('"', '""') + '"'
            con.execute(f"USE {self._catalog}")
            for key, value in locked.items():
                con.execute(f"SET {key} = {sql_string(str(value))}")
        except BaseException:
            con.close()
            raise
        return con

    def _cursor(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """A new connection to the store's database, with its file as the default catalog."""
        cursor = con.cursor()
        if self._catalog is not None:
            try:
                cursor.execute(f"USE {self._catalog}")
            except BaseException:
                cursor.close()
                raise
        return cursor

    def _take_up_staged(self) -> None:
        """Commit what a previous process acknowledged into its staging log but did not move (it
        stopped without a clean shutdown). They count as spans it committed: the windows follow them
        the way they follow spans a crashed process committed (`open_windows`)."""
        path = staging_path(self.path)
        found = read_staged(path)
        if not found.file_bytes:
            return
        if found.tables:
            try:
                result = self._append(_concat(found.tables), follow=False, wait=False, windows=False)
            except Exception:
                aside = set_aside(path)
                log.exception("the %d staged batches in %s could not be stored; the file is kept as %s",
                              len(found.tables), path, aside)
                return
            log.info("stored %d spans (%d already stored) that the previous run acknowledged in %s",
                     result.inserted, result.duplicates, path)
        if found.torn_bytes:
            # a write cut short by a crash was never acknowledged; anything else there is kept for a person
            aside = set_aside(path)
            log.warning("%s ended with %d bytes that are no whole record (a write cut short by a crash is"
                        " never acknowledged); the file is kept as %s", path, found.torn_bytes, aside)
        elif not self._staging:
            os.unlink(path)

    def _drop_old_indexes(self) -> None:
        """Files of earlier versions have a primary key and two indexes on `spans`: drop them
        (the table is copied once to drop its key; a table cannot lose a constraint in place)."""
        con = self._con
        for name in _OLD_INDEXES:
            con.execute(f"DROP INDEX IF EXISTS {name}")
        keyed = con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND constraint_type = 'PRIMARY KEY'",
            [SPANS_TABLE]).fetchall()[0][0]
        if not keyed:
            return
        log.info("copying %s once to drop the primary key of earlier versions", SPANS_TABLE)
        con.execute("BEGIN")
        try:
            con.execute(f"CREATE TABLE {SPANS_TABLE}__copy AS SELECT * FROM {SPANS_TABLE}")
            con.execute(f"DROP TABLE {SPANS_TABLE}")
            con.execute(f"ALTER TABLE {SPANS_TABLE}__copy RENAME TO {SPANS_TABLE}")
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
        for statement in STORE_DDL:  # views over the new table
            con.execute(statement)
        con.execute("CHECKPOINT")

    def _fill_locator(self) -> None:
        """Put every stored span's keys in the locator, in commit order."""
        self._locator.clear()
        reader = self._con.sql(
            f"SELECT trace_id, span_id, task_id, epoch_us(received_at) AS us FROM {SPANS_TABLE}").to_arrow_reader(50_000)
        for batch in reader:
            us = batch.column(3).to_numpy()
            keys = key_hashes(pa.Table.from_batches([batch]))
            self._locator.add(_row_key_hashes(keys), int(us.min()), int(us.max()), gated=keys.column("s").to_numpy())

    def shutdown(self) -> None:
        if self._con is not None:
            self.close_queue()  # first: a move at shutdown does not wait for the window lag
            moved = self._log is None or self._move_at_shutdown()
            if not self.read_only:
                try:
                    self.update_windows()
                except Exception:  # noqa: BLE001 - the spans are stored; windows are rebuilt at the next start
                    log.exception("updating the windows at shutdown failed")
                else:
                    self._save_window_state()
                self._span_cursor.close()
            self._reader.close()
            if not self.read_only:
                try:
                    self._con.execute("CHECKPOINT")
                except duckdb.Error:
                    log.exception("checkpoint at shutdown failed; the WAL still holds every commit")
            if self._log is not None:
                self._log.close(remove=moved)
                self._log = None
            self._con.close()
            self._con = None

    def _move_at_shutdown(self) -> bool:
        try:
            self.move_staged()
        except Exception:  # noqa: BLE001 - the staging log keeps them; the next start stores them
            log.exception("storing the staged spans at shutdown failed; %s keeps them for the next start",
                          self._log.path)
            return False
        return True

    # --- writing ---------------------------------------------------------------------------------
    def write(self, table: pa.Table, *, refresh_windows: bool = True) -> WriteResult:
        """Insert span rows, ignoring any (trace_id, span_id) already stored, and update the
        windows the new rows change. Returns once both are durable.

        A bulk loader may pass ``refresh_windows=False`` and call `refresh_all_windows` (or
        `refresh_windows` with the keys it touched) once at the end."""
        result = self.append(table, follow=refresh_windows, wait=False)
        self.update_windows()
        return result

    def append(self, table: pa.Table, *, follow: bool = True, wait: bool = True) -> WriteResult:
        """Insert span rows, ignoring any (trace_id, span_id) already stored, and commit. The
        windows follow: the batch is queued for `update_windows` (run by a `WindowUpdater`
        thread, or by the caller). With ``wait``, first wait while more than the window lag
        budget of rows is queued, so memory stays bounded when the windows fall behind.

        ``follow=False`` (bulk loads) leaves the windows as they are; rebuild them afterwards."""
        return self._append(table, follow=follow, wait=wait)

    # --- staging (the collector's writer; see `_staging`) -----------------------------------------
    def stage(self, table: pa.Table) -> None:
        """Make span rows durable in the staging log; they are committed in DuckDB by a later
        `move_staged` (another thread's, when `move_due` says so), together with the batches staged
        after them. A store without staging appends them at once. Raises when they are not durable."""
        if self._log is None:
            self.append(table)
            return
        with self._changed:
            # At the bound, wait for the mover (it may itself wait for the windows in a burst); refuse
            # only when its last move failed, or the store is closing.
            while self._staged_rows >= self._window_lag_rows:
                if self._move_retry_at or self._closing:
                    raise RuntimeError(f"{self._staged_rows} staged span rows are waiting to be stored in "
                                       f"{self.path}, the most allowed: storing them fails (see the log)")
                self._changed.wait(1.0)
        with self._log_lock:
            self._log.append(table)
            with self._changed:
                if not self._staged:
                    self._staged_since = time.monotonic()
                self._staged.append(table)
                self._staged_rows += table.num_rows
                self._staged_total += table.num_rows

    def move_due(self) -> float | None:
        """Seconds until the staged rows should be moved (0: now), or None when none are staged."""
        with self._changed:
            if not self._staged:
                return None
            now = time.monotonic()
            if now < self._move_retry_at:
                return self._move_retry_at - now
            if self._staged_rows >= self._stage_move_rows or self._readers_waiting or self._closing:
                return 0.0
            return max(0.0, self._staged_since + self._stage_move_s - now)

    def move_staged(self) -> int:
        """Commit the staged rows in one INSERT (see `append`), then empty the staging log.
        Returns the rows moved. On failure they stay staged, to be tried again a second later.

        Every staged row is moved when a query waits for them, the store is closing, or the oldest
        has waited ``stage_move_s``; otherwise only whole row groups of them (`ROW_GROUP_ROWS`), in
        staging order, when there is one: DuckDB writes those to the file compressed at once, and the
        rest, kept staged, would wait uncompressed in its memory until a checkpoint.

        `stage` may run meanwhile (in the writer, while this runs in a thread of its own). The log
        is emptied only when DuckDB holds every row it holds: when rows were staged during the
        INSERT, it keeps its records until a later move, unless it has grown past
        `STAGING_LOG_KEEP_BYTES`; then those rows are stored too, with staging held, and it is emptied."""
        with self._changed:
            staged, rows = list(self._staged), self._staged_rows
            if not (self._readers_waiting or self._closing
                    or time.monotonic() >= self._staged_since + self._stage_move_s):
                rows = rows // self._row_group_rows * self._row_group_rows or rows  # whole row groups, if any
        if not staged:
            return 0
        moved = self._move(staged, rows)
        with self._log_lock:
            with self._changed:
                rest = list(self._staged)
            if rest:
                if self._log.size <= self._log_keep_bytes:
                    return moved  # they wait for the next move; the log keeps the stored records beside them
                moved += self._move(rest)
            self._log.clear()
        return moved

    def _move(self, staged: list[pa.Table], rows: int | None = None) -> int:
        """Store ``staged`` (the first staged tables), or only their first ``rows`` rows."""
        table, rest = _concat(staged), None
        if rows is not None and rows < table.num_rows:
            table, rest = table.slice(0, rows), table.slice(rows)
        try:
            result = self._append(table, follow=True, wait=True, moved=len(staged), rest=rest)
        except BaseException:
            with self._changed:
                self._move_retry_at = time.monotonic() + 1.0
                self._changed.notify_all()  # a `stage` waiting at the bound refuses now
            raise
        with self._changed:
            self._move_retry_at = 0.0
        return result.received

    def _append(self, table: pa.Table, *, follow: bool, wait: bool, windows: bool = True,
                moved: int = 0, rest: pa.Table | None = None) -> WriteResult:
        """`append`; ``windows=False`` does not queue the batch for the windows (spans committed
        before the windows are opened, which `open_windows` takes up); ``moved``: the first staged
        batches, which this batch commits (they stop counting as staged in the step where the batch
        starts counting as committed, so a waiting query cannot miss them), but for ``rest``, their
        last rows, which stay staged in their place."""
        if self._span_cursor is None:
            raise RuntimeError("the store is not started, or was opened read-only")
        received = table.num_rows
        with self._span_lock:
            if wait:
                with self._changed:
                    while self._pending_rows > self._window_lag_rows and not self._closing:
                        self._changed.wait(1.0)
            received_us = self._next_received_us()
            table = stamp_received_at(table, received_us)
            cursor = self._span_cursor
            keys = key_hashes(table)
            first = _first_of_each_span(table, keys.column("s").to_numpy())
            if first is not table:  # a span was repeated in the batch
                table, keys = first, key_hashes(first)
            span_hashes = keys.column("s").to_numpy()
            with self._locator_lock:
                stored = self._locator.ranges(span_hashes)
            if stored:  # some span may be stored already (a retried export): leave those out
                self.stats["duplicate_checks"] += 1
                cursor.register("_incoming", table)
                try:
                    inserted = _count(cursor.execute(
                        f"INSERT INTO {SPANS_TABLE} SELECT * FROM _incoming i WHERE NOT EXISTS ("
                        f"SELECT 1 FROM ({_ranges_sql(stored)}) s"
                        " WHERE s.trace_id = i.trace_id AND s.span_id = i.span_id)"))
                finally:
                    cursor.unregister("_incoming")
            else:
                # A relation over the batch: no registration, and no count to read back (every row goes in).
                cursor.from_arrow(table).insert_into(SPANS_TABLE)
                inserted = table.num_rows
            with self._locator_lock:
                self._locator.add(_row_key_hashes(keys), received_us, gated=span_hashes)
            with self._changed:
                if windows:
                    self._pending.append(_Stored(table.select(_WINDOW_INPUT), keys, received_us, follow))
                    self._pending_rows += table.num_rows
                    self._stored += 1
                if moved:  # ``received`` rows leave staging; the rest of the moved tables stays in their place
                    self._staged[:moved] = [] if rest is None else [rest]
                    self._staged_rows -= received
                if moved and self._staged:  # the rest, or staged during this move: their second starts about now
                    self._staged_since = time.monotonic()
                self._stored_rows += int(inserted)
                self._changed.notify_all()
        return WriteResult(received=received, inserted=int(inserted))

    def update_windows(self) -> int:
        """Bring the windows up to date with every span committed so far: the queued batches are
        processed together. Returns how many batches were processed.

        A store on a file that already held spans, whose windows were not opened (a tool's, such
        as `meritlens evaluate` on the file), writes no window rows and no watermark for followed
        batches: its book does not hold the stored spans' state, and the stored watermark must not
        pass spans committed before it (e.g. by a process killed before its window pass). The next
        `open_windows` follows them."""
        with self._window_lock:
            if self._replay_until_us is not None:
                if not self._closing:
                    self._replay()
                if self._replay_until_us is not None:  # stopped by a shutdown: later batches wait for the next start
                    return 0
            with self._changed:
                group = list(self._pending)
            if not group:
                return 0
            until_us = group[-1].received_us
            bulk = [s.keys for s in group if not s.follow and s.table.num_rows]
            if bulk:  # their windows are rebuilt by the loader; later batches must find their keys
                self._keys.add(_trace_task_hashes(_concat(bulk)))
                self._invalidate_watermark()
            followed = [s for s in group if s.follow and s.table.num_rows]
            if followed and not (self._held_spans_at_start and not self._windows_opened):
                self._follow(_concat([s.table for s in followed]), until_us, _concat([s.keys for s in followed]))
            self._mark_processed(group, until_us)
            return len(group)

    def wait_for_spans(self, timeout: float | None = None) -> bool:
        """Block until spans are queued for the windows (True) or ``timeout`` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending or self._closing or self._replay_until_us is not None,
                                          timeout) and bool(self._pending or self._replay_until_us is not None)

    def wait_for_windows(self, timeout: float | None = None) -> bool:
        """Block until the windows include every span committed or staged (acknowledged) before this
        call; False on timeout."""
        with self._changed:
            staged = self._staged_total

            def committed() -> bool:
                return self._staged_total - self._staged_rows >= staged

            if committed() and self._windowed >= self._stored:
                return True
            self._readers_waiting += 1  # the mover moves every staged row; the windows stop gathering
            self._changed.notify_all()
            if self._staged_rows and self.on_move_demand is not None:
                self.on_move_demand()
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                # First every row staged before the call committed (a move under way may commit
                # only some of them), then the windows up to the batch that did.
                if not self._changed.wait_for(committed, timeout):
                    return False
                target = self._stored
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                return self._changed.wait_for(lambda: self._windowed >= target, left)
            finally:
                self._readers_waiting -= 1

    def wait_for_demand(self, timeout: float) -> None:
        """Let committed batches gather for up to ``timeout``: return sooner when a query waits
        for the windows, when half the lag budget is queued, or at shutdown."""
        with self._changed:
            self._changed.wait_for(lambda: self._readers_waiting or self._closing
                                   or 2 * self._pending_rows >= self._window_lag_rows, timeout)

    def staged_rows(self) -> int:
        """Acknowledged span rows in the staging log that DuckDB does not hold yet."""
        with self._changed:
            return self._staged_rows

    def window_lag(self) -> tuple[int, int]:
        """(batches, rows) committed that the windows do not include yet."""
        with self._changed:
            return len(self._pending), self._pending_rows

    def close_queue(self) -> None:
        """Wake every waiter: a shutdown is under way (writers stop waiting for the window lag)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    def _follow(self, table: pa.Table, until_us: int, hashes: pa.Table | None = None) -> None:
        """Apply the stored rows of ``table`` (the batches committed after the windows' watermark,
        up to ``until_us``) to the windows, in one transaction of window rows. ``hashes``: the
        rows' `key_hashes` columns, when the caller has them."""
        con = self._con
        keys = touched_keys(table)
        targets = {k[0] for k in keys}
        if hashes is None:
            hashes = key_hashes(table)
        rebuild: set[str] = set()
        if keys:
            try:
                closure = self._closure(table, hashes, until_us)
            except Exception:  # noqa: BLE001 - the windows are rebuilt instead
                log.exception("reading the stored spans a batch touches failed; windows rebuilt instead")
                closure, rebuild = None, targets
            if closure is not None:
                con.execute("BEGIN")
                try:
                    removed, added = self._batch_delta(table, hashes, closure)
                    # A task's spans may carry several targets: a batch of one can change another's samples.
                    targets |= _sample_targets(removed) | _sample_targets(added)
                    self._write_window_rows(self._apply_delta(removed, added, targets, until_us), until_us)
                    con.execute("COMMIT")
                except StateMismatch as exc:
                    _rollback(con)
                    log.info("window state rebuilt from the spans: %s", exc)
                    rebuild = targets
                except Exception:  # noqa: BLE001 - the spans are stored; the windows are rebuilt
                    _rollback(con)
                    log.exception("updating windows failed; windows rebuilt from the spans")
                    rebuild = targets
                except BaseException:
                    _rollback(con)
                    self._forget(targets)  # the state may hold what was rolled back
                    raise
        else:  # no application span: only the watermark moves
            self._store_windows(set(), until_us)
        self._keys.add(_trace_task_hashes(hashes))
        if rebuild:
            self._forget(rebuild)
            try:
                self._rebuild(rebuild, until_us)
            except Exception:  # noqa: BLE001 - the spans are stored; the windows follow later
                log.exception("rebuilding the windows of %s failed; retried on their next batch", sorted(rebuild))
                self._invalidate_watermark()

    def _next_received_us(self) -> int:
        """A commit time in µs, later than every earlier batch's: the windows' watermark orders batches by it."""
        us = time.time_ns() // 1000
        self._last_received_us = max(us, self._last_received_us + 1)
        return self._last_received_us

    def refresh_windows(self, keys: set[tuple[str, str]]) -> None:
        """Recompute, from every stored span, the windows of the targets of the given (target_id, scope) keys."""
        if keys:
            self.update_windows()
            with self._window_lock:
                self._rebuild({k[0] for k in keys}, self._windowed_us)

    def refresh_all_windows(self) -> int:
        """Recompute every window from the stored spans (at start-up: windows equal a from-scratch
        run); fills the key filter. Returns the number of (target, scope) keys."""
        with self._window_lock:
            with self._changed:
                group = list(self._pending)
            until_us = max(self._windowed_us, group[-1].received_us if group else 0)
            self._fill_key_filter()
            self._book = WindowBook()
            self._evicted.clear()
            self._recency.clear()
            self._watermark_valid = True
            rebuilt = len(self._rebuild(None, until_us))
            self._mark_processed(group, until_us)
            with self._changed:  # a crash before the next save would recompute them all again
                self._rows_since_state_save += self._stored_rows
            self._windows_opened = True
            return rebuilt

    def open_windows(self) -> tuple[int, bool]:
        """At start: take up the stored windows where they were left, else recompute them all.

        The stored rows are taken as they are when the watermark stored with them was written by
        this version of the window definitions (`window_definitions_digest`) and at most the window
        lag budget of rows was committed after it, or a saved window state can follow them. The
        window state saved last (`_save_window_state`: periodically and at a clean shutdown) is
        loaded when it belongs to these definitions and is not newer than the watermark; when it is
        older (a crash after the save), the window thread first brings it up to date from the spans
        committed since (`_replay`). Every other target's state is rebuilt from its spans on its
        next batch, as after an eviction; the key filter is filled, and the spans committed after
        the watermark are applied. Otherwise `refresh_all_windows`. A saved state that was not taken
        up is deleted; one taken up stays until the next save replaces it.
        Returns (the number of (target, scope) keys, whether the stored windows were taken up)."""
        with self._window_lock:
            start_us = self._windowed_us
            self._state_kept_us = None
            try:
                resumed = self._resume()
            except Exception:  # noqa: BLE001 - the rebuild below recomputes everything it touched
                log.exception("taking up the stored windows failed; recomputing them")
                self._windowed_us, resumed = start_us, None
                self._state_kept_us, self._replay_until_us = None, None
        opened = (self.refresh_all_windows(), False) if resumed is None else (resumed, True)
        try:
            if self._state_kept_us is None:
                self._con.execute(f"DELETE FROM {WINDOW_STATE_TABLE}")
            else:
                self._con.execute(f"DELETE FROM {WINDOW_STATE_TABLE} WHERE windowed_us <> ?", [self._state_kept_us])
        except duckdb.Error:
            log.exception("deleting the saved window state failed (it no longer matches the watermark)")
        return opened

    def _resume(self) -> int | None:
        con = self._con
        with self._changed:
            if self._pending:
                return None
        stored = self._stored_watermark()
        if stored is None:
            return None
        watermark, digest = stored
        watermark = int(watermark)
        if digest != window_definitions_digest(self.db_name):
            log.info("the window definitions changed since the windows were stored; recomputing them")
            return None
        book, state_us = self._saved_window_state(watermark, digest)
        if state_us is not None and state_us < watermark:
            behind = self._count_committed_after(state_us)
            if behind > max(self._window_lag_rows, self._stored_rows // _MAX_REPLAY_FRACTION):
                log.info("the saved window state is %d spans behind; targets are rebuilt from their spans", behind)
                book, state_us = WindowBook(), None
        later = self._count_committed_after(watermark)
        if state_us is None and later > self._window_lag_rows:
            log.info("%d spans were committed after the stored windows; recomputing them", later)
            return None
        replay = state_us is not None and state_us < watermark
        # A replay adds each chunk's keys as a window pass does: a key is looked up among the stored
        # spans only when spans committed before its chunk may hold it.
        self._fill_key_filter(state_us if replay else None)
        self._book = book
        self._state_kept_us = state_us
        self._recency = dict.fromkeys(self._book.keys, 0)
        self.stats["state_keys_taken_up"] = len(self._book.keys)
        self._evicted = {t for (t,) in con.execute(
            f"SELECT DISTINCT target_id FROM {SPANS_TABLE} WHERE {APPLICATION_SPANS}").fetchall()}
        self._evicted -= {target for target, _ in self._book.keys}
        self._evict()
        self._watermark_valid = True
        if replay:
            # The stored rows include the spans up to the watermark; the state does not yet.
            self._windowed_us = state_us
            self._replay_until_us = max(self._last_received_us, watermark)
        else:
            self._windowed_us = watermark
            if later:
                rows = con.sql(f"SELECT {_WINDOW_INPUT_SQL} FROM {SPANS_TABLE}"
                               f" WHERE received_at > {_timestamp_sql(watermark)} ORDER BY received_at").to_arrow_table()
                table = _conform(rows, _INCOMING_SCHEMA)
                until_us = int(pc.max(pc.cast(table.column("received_at"), pa.int64())).as_py())
                self._follow(table, until_us)
                self._mark_processed([], until_us)
        self.stats["resumes"] += 1
        self._windows_opened = True
        return con.execute(f"SELECT count(*) FROM (SELECT DISTINCT target_id, scope FROM {WINDOWS_TABLE})"
                           ).fetchall()[0][0]

    def _count_committed_after(self, us: int) -> int:
        return self._con.execute(
            f"SELECT count(*) FROM {SPANS_TABLE} WHERE received_at > {_timestamp_sql(us)}").fetchall()[0][0]

    def _replay(self) -> None:
        """Bring the window state taken up at start, older than the stored windows, up to every span
        stored at start: the spans the stored rows already include change only the state (in
        chunks of whole batches, as the window passes saw them); the later ones are applied as a
        window pass applies them, rows and watermark included. Targets without saved state are
        left to rebuild on their next batch. If the replay fails, every window is recomputed.
        A shutdown (`close_queue`) stops it between chunks: the replay stays pending, no later
        batch is applied, and the state saved before stays for the next start to replay from."""
        con = self._con
        until_us = self._replay_until_us
        started, replayed = time.monotonic(), 0
        try:
            floor_us = int(self._stored_watermark()[0])  # the crashed run's: its rows include the spans up to it
            batches = con.execute(
                f"SELECT epoch_us(received_at), count(*) FROM {SPANS_TABLE}"
                f" WHERE received_at > {_timestamp_sql(self._windowed_us)} AND received_at <= {_timestamp_sql(until_us)}"
                " GROUP BY 1 ORDER BY 1").fetchall()
            for lo, hi in _replay_chunks(batches, self._windowed_us, floor_us, self._window_lag_rows):
                if self._closing:  # a shutdown: the state saved before stays, and the next start replays from it
                    log.info("replaying the saved window state stopped for the shutdown after %d stored spans;"
                             " the next start replays from the saved state", replayed)
                    return
                rows = con.sql(f"SELECT {_WINDOW_INPUT_SQL} FROM {SPANS_TABLE} WHERE received_at > {_timestamp_sql(lo)}"
                               f" AND received_at <= {_timestamp_sql(hi)} ORDER BY received_at").to_arrow_table()
                table = _conform(rows, _INCOMING_SCHEMA)
                if hi <= floor_us:
                    self._replay_state(table, hi)
                else:
                    self._follow(table, hi)
                self._mark_processed([], hi)
                replayed += table.num_rows
            self.stats["state_replayed_spans"] += replayed
            with self._changed:  # the saved state is that far behind: counted towards the next save
                self._rows_since_state_save += replayed
            log.info("window state brought up to date from %d stored spans in %.1f s", replayed,
                     time.monotonic() - started)
            self._replay_until_us = None
        except Exception:  # noqa: BLE001 - the spans are stored; a full rebuild recomputes every window
            log.exception("bringing the saved window state up to date failed; recomputing every window")
            self._replay_until_us = None
            self._mark_processed([], until_us)  # the recomputation covers every span stored at start
            try:
                self.refresh_all_windows()
            except Exception:  # noqa: BLE001 - the next start recomputes them
                log.exception("recomputing the windows failed; the next start recomputes them")
                self._invalidate_watermark()

    def _replay_state(self, table: pa.Table, until_us: int) -> None:
        """Apply stored rows (committed after ``_windowed_us``, up to ``until_us``) to the state of the
        loaded targets only: the stored window rows include them already."""
        keys = touched_keys(table)
        hashes = key_hashes(table)
        targets = {k[0] for k in keys} - self._evicted
        try:
            if keys:
                closure = self._closure(table, hashes, until_us)
                removed, added = self._batch_delta(table, hashes, closure)
                targets |= (_sample_targets(removed) | _sample_targets(added)) - self._evicted
                self._apply_delta(removed, added, targets, until_us, skip_targets=set(self._evicted))
                self._evict()  # within --window-memory-bytes as after a pass; dropped targets rebuild later
        except StateMismatch as exc:
            log.info("window state of %s rebuilt from the spans on its next batch: %s", sorted(targets), exc)
            self._forget(targets)
        finally:
            self._keys.add(_trace_task_hashes(hashes))

    def _stored_watermark(self) -> tuple[int, str] | None:
        """(windowed_us, definitions_digest) stored with the window rows, or None."""
        stored = self._con.execute(f"SELECT windowed_us, definitions_digest FROM {WINDOW_WATERMARK_TABLE}"
                                   f" WHERE store = '{SPANS_TABLE}'").fetchall()
        return stored[0] if stored else None

    def _saved_window_state(self, watermark: int, digest: str) -> tuple[WindowBook, int | None]:
        """The window state saved last and its watermark, if it was saved with the definitions
        ``digest`` at ``watermark`` or before; else (none saved, another digest, a later watermark,
        unreadable) an empty book and None. Rows of a save cut short (watermark -1) are ignored.
        Read target by target, so that at most one target's rows are held twice."""
        con = self._con
        finished = f"windowed_us <> {_UNFINISHED_STATE_US}"
        saved, watermarks, state_us, matching = con.execute(
            f"SELECT count(*), count(DISTINCT windowed_us), min(windowed_us), count(*) FILTER (WHERE definitions_digest = ?)"
            f" FROM {WINDOW_STATE_TABLE} WHERE {finished}", [digest]).fetchall()[0]
        if saved == 0:
            return WindowBook(), None
        if watermarks != 1 or matching != saved or state_us > watermark:
            log.info("the saved window state does not belong to the stored windows; targets are rebuilt from their spans")
            return WindowBook(), None
        columns = ", ".join(WINDOW_STATE_COLUMN_NAMES[2:])
        targets = [t for (t,) in con.execute(
            f"SELECT DISTINCT target_id FROM {WINDOW_STATE_TABLE} WHERE {finished} ORDER BY 1").fetchall()]

        def rows():
            for target in targets:  # insertion order within a target: each window's parts in order
                yield from con.execute(f"SELECT {columns} FROM {WINDOW_STATE_TABLE} WHERE {finished} AND target_id = ?",
                                       [target]).fetchall()

        try:
            book = WindowBook.restore(rows())
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("the saved window state cannot be taken up (%s); targets are rebuilt from their spans", exc)
            return WindowBook(), None
        log.info("window state of %d keys taken up (saved %s the stored windows)", len(book.keys),
                 "with" if state_us == watermark else "before")
        return book, int(state_us)

    def save_window_state_if_due(self) -> bool:
        """Save the window state (`_save_window_state`) when enough spans were windowed since the
        last save: 1/8 of the stored spans (at least 1,000,000), or any after 10 minutes. A crash
        then costs the next start a replay of at most about that many spans instead of a rebuild
        of every target from all its spans. Returns whether it saved. Run by the window thread."""
        with self._changed:
            rows = self._rows_since_state_save
        if rows == 0 or not self._windows_opened:
            return False
        due = (rows >= max(_STATE_SAVE_MIN_SPANS, self._stored_rows // _STATE_SAVE_FRACTION)
               or time.monotonic() - self._state_saved_at >= _STATE_SAVE_INTERVAL_S)
        return self._save_window_state() if due else False

    def _save_window_state(self) -> bool:
        """Save the window state (`WindowBook.state_rows`) with the stored watermark, replacing the
        state saved before, so that a start takes it up instead of rereading every target's spans.
        Only whole state at the stored watermark is saved: after `open_windows`, with the watermark
        valid and no replay under way; a state saved at that watermark already is left as it is.
        A store that never opened the windows (a tool's) leaves a saved state alone, and its window
        passes leave the watermark alone (`update_windows`), so the next start takes the state up
        and applies the tool's spans to it. A failure is logged
        and leaves the state saved before; the next start then replays from it or rebuilds.
        Returns whether it saved."""
        if not self._windows_opened:
            return False
        with self._window_lock:
            con = self._con
            try:
                stored = self._stored_watermark()
                if (self._replay_until_us is not None or not self._watermark_valid
                        or stored != (self._windowed_us, self._definitions_digest())):
                    return False
                # Rows are committed statement by statement under an impossible watermark, then
                # take the place of the state saved before in one transaction: one transaction of
                # all the payloads would hold them ~3x in DuckDB's memory until its commit. A crash
                # in between leaves rows that match no watermark; the next start ignores and
                # deletes them, and takes up the state saved before.
                windowed_us, digest = stored
                if con.execute(f"SELECT count(*) FROM {WINDOW_STATE_TABLE} WHERE windowed_us = ?",
                               [windowed_us]).fetchall()[0][0]:
                    # saved at this watermark already (taken up at start, or saved since): nothing newer
                    with self._changed:
                        self._rows_since_state_save = 0
                    return False
                started = time.monotonic()
                con.execute(f"DELETE FROM {WINDOW_STATE_TABLE} WHERE windowed_us = ?", [_UNFINISHED_STATE_US])
                self._insert_window_state(_UNFINISHED_STATE_US, digest)
                con.execute("BEGIN")
                try:
                    con.execute(f"DELETE FROM {WINDOW_STATE_TABLE} WHERE windowed_us <> ?", [_UNFINISHED_STATE_US])
                    con.execute(f"UPDATE {WINDOW_STATE_TABLE} SET windowed_us = ? WHERE windowed_us = ?",
                                [windowed_us, _UNFINISHED_STATE_US])
                    con.execute("COMMIT")
                except BaseException:
                    _rollback(con)
                    raise
                self.stats["state_keys_saved"] = len(self._book.keys)
                self.stats["state_saves"] += 1
                log.info("window state of %d keys saved in %.1f s", len(self._book.keys), time.monotonic() - started)
                with self._changed:
                    self._rows_since_state_save = 0
                self._state_saved_at = time.monotonic()
                return True
            except Exception:  # noqa: BLE001 - the spans and windows are stored; the state is rebuilt instead
                log.exception("saving the window state failed; a start replays the state saved before, or rebuilds")
                return False

    def _insert_window_state(self, windowed_us: int, digest: str) -> None:
        con = self._con
        rows: list[tuple] = []
        held = 0

        def flush() -> None:
            con.register("_state", pa.table(dict(zip(WINDOW_STATE_COLUMN_NAMES[2:], zip(*rows)))))
            try:
                con.execute(f"INSERT INTO {WINDOW_STATE_TABLE} SELECT ?, ?, * FROM _state", [windowed_us, digest])
            finally:
                con.unregister("_state")
            rows.clear()

        for row in self._book.state_rows():
            rows.append(row)
            held += len(row[-1])
            if held >= _STATE_FLUSH_BYTES:
                flush()
                held = 0
        if rows:
            flush()

    def _fill_key_filter(self, until_us: int | None = None) -> None:
        """The key filter holds the trace and task keys of the stored spans (committed up to ``until_us``)."""
        self._keys.clear()
        committed = f"received_at <= {_timestamp_sql(until_us)}" if until_us is not None else "true"
        for batch in self._con.sql(
            f"SELECT trace_id AS key FROM {SPANS_TABLE} WHERE {committed}"
            f" UNION ALL SELECT task_id FROM {SPANS_TABLE} WHERE task_id IS NOT NULL AND {committed}"
        ).to_arrow_reader(_REBUILD_BATCH_ROWS):
            self._keys.add(string_hashes(batch.column(0)))

    def _invalidate_watermark(self) -> None:
        """The window rows may now miss committed spans: store no watermark until a full rebuild."""
        self._watermark_valid = False
        try:
            self._con.execute(f"DELETE FROM {WINDOW_WATERMARK_TABLE}")
        except duckdb.Error:
            log.exception("removing the windows' watermark failed")

    def _mark_processed(self, group: list["_Stored"], until_us: int) -> None:
        with self._changed:
            del self._pending[:len(group)]
            rows = sum(s.table.num_rows for s in group)
            self._pending_rows -= rows
            self._rows_since_state_save += rows
            self._windowed_us = max(self._windowed_us, until_us)
            self._windowed += len(group)
            self._changed.notify_all()

    # --- the window processor ------------------------------------------------------------------------
    def _closure(self, table: pa.Table, hashes: pa.Table, until_us: int) -> pa.Table:
        """The stored spans (committed up to ``until_us``, the batch's own included) of every task
        and trace the batch's application spans touch, closed over: all spans of every task and of
        every trace in it. ``hashes``: the batch's `key_hashes` columns, row by row; keys
        the key filter has not seen have no stored rows outside the batch."""
        app = _application_mask(table)
        trace = hashes.column("t").to_numpy()[app]
        no_task = hashes.column("no_task").to_numpy(zero_copy_only=False)[app]
        task_or_trace = np.where(no_task, trace, hashes.column("k").to_numpy()[app])
        rows = _application_rows(table, app)
        candidates = set(rows.column("trace_id").filter(self._keys.may_contain(trace)).to_pylist()) | set(
            pc.coalesce(rows.column("task_id"), rows.column("trace_id")).filter(
                self._keys.may_contain(task_or_trace)).to_pylist())
        fetched = table.schema.empty_table()
        seen_keys: set[str] = set()
        while candidates - seen_keys:
            todo = candidates - seen_keys
            seen_keys |= todo
            rows = self._lookup(todo, until_us)
            if rows.num_rows == 0:
                continue
            rows = _conform(rows, table.schema)
            fetched = pa.concat_tables([fetched, rows]) if fetched.num_rows else rows
            found = set(rows.column("trace_id").to_pylist()) | {
                k for k in rows.column("task_id").to_pylist() if k is not None
            }
            candidates |= found
        return _first_of_each_span(fetched)

    def _lookup(self, keys: set[str], until_us: int) -> pa.Table:
        """Stored spans, committed up to ``until_us``, whose trace_id or task_id is one of ``keys``."""
        con = self._con
        self.stats["closure_keys"] += len(keys)
        listed = pa.table({"k": sorted(keys)})
        con.register("_keys", listed)
        try:
            hashes = string_hashes(listed.column("k"))
            with self._locator_lock:
                # trace and task keys: the key filter of the window processor gated them already
                ranges = [(a, min(b, until_us)) for a, b in self._locator.ranges(hashes, until_us, gated=False)]
            if not ranges:
                return con.sql(f"SELECT * FROM {SPANS_TABLE} LIMIT 0").to_arrow_table()
            self.stats["closure_lookups"] += 1
            self.stats["closure_ranges"] += len(ranges)
            return con.sql(
                f"SELECT * FROM ({_ranges_sql(ranges, _WINDOW_INPUT_SQL)}) WHERE trace_id IN (SELECT k FROM _keys)"
                " OR task_id IN (SELECT k FROM _keys)").to_arrow_table()
        finally:
            con.unregister("_keys")

    def _batch_delta(self, table: pa.Table, hashes: pa.Table, closure: pa.Table) -> tuple[pa.Table | None, pa.Table]:
        """(samples removed, samples added) by ``table`` (the batches committed after the watermark;
        ``hashes`` its `key_hashes` columns), given the closure's stored rows. Changes no state."""
        committed_us = pc.cast(closure.column("received_at"), pa.int64())
        before = closure.filter(pc.less_equal(committed_us, self._windowed_us))
        if closure.num_rows:
            after = _first_of_each_span(pa.concat_tables([closure, table]))  # stored rows win over retries
        else:
            after = _first_of_each_span(table, hashes.column("s").to_numpy())
        return self._delta(before, after)

    def _apply_delta(self, removed: pa.Table | None, added: pa.Table, targets: set[str], until_us: int,
                     skip_targets: set[str] = frozenset()) -> set[tuple[str, str]]:
        """Apply a `_batch_delta` (of the batches committed up to ``until_us``) to the window state;
        return the keys whose rows must be written. ``targets`` must hold every target of the delta:
        those evicted are rebuilt from their spans instead. The delta of ``skip_targets`` is left
        out. Raises StateMismatch when the state cannot follow."""
        evicted = targets & self._evicted
        rebuilt = self._rebuild_state(evicted, until_us) if evicted else set()
        skip = {key for key in self._book.keys if key[0] in evicted}
        return rebuilt | self._book.apply_delta(removed, added, skip_keys=skip, skip_targets=skip_targets)

    def _forget(self, targets: set[str]) -> None:
        """Drop the state of ``targets``; it is rebuilt from the spans on their next batch."""
        for key in list(self._book.keys):
            if key[0] in targets:
                self._book.drop(key)
                self._recency.pop(key, None)
        self._evicted |= targets

    def _select_arrow(self, sql: str) -> pa.Table:
        """The result of a SELECT the window processor runs on every batch (over relations it
        registers anew each time), prepared on ``_con`` once and executed after: `con.sql` of a
        SELECT parses and binds it twice, once to describe the relation (~15 ms of a window pass)."""
        name = self._prepared.get(sql)
        if name is None:
            name = f"_meritlens_{len(self._prepared)}"
            self._con.execute(f"PREPARE {name} AS {sql}")
            self._prepared[sql] = name
        return self._con.sql(f"EXECUTE {name}").to_arrow_table()

    def _delta(self, before: pa.Table, after: pa.Table) -> tuple[pa.Table | None, pa.Table]:
        """(samples removed, samples added) by the batch among the closure's tasks."""
        con = self._con
        con.register("_after", after)
        try:
            added = self._select_arrow(sample_rows_sql("_after"))
        finally:
            con.unregister("_after")
        if before.num_rows == 0:  # only new tasks: nothing to take out
            return None, added
        con.register("_before", before)
        try:
            removed = self._select_arrow(sample_rows_sql("_before"))
        finally:
            con.unregister("_before")
        # samples of closure tasks the batch did not change cancel out
        con.register("_old", removed)
        con.register("_new", added)
        try:
            only_old = self._select_arrow("SELECT * FROM _old EXCEPT ALL SELECT * FROM _new")
            only_new = self._select_arrow("SELECT * FROM _new EXCEPT ALL SELECT * FROM _old")
        finally:
            con.unregister("_old")
            con.unregister("_new")
        return only_old, only_new

    def _rebuild(self, targets: set[str] | None, until_us: int) -> set[tuple[str, str]]:
        """Window state and rows of ``targets`` (None: all) recomputed from every span committed
        up to ``until_us``; returns the (target, scope) keys."""
        keys = self._rebuild_state(targets, until_us)
        self._store_windows(keys, until_us)
        return keys

    def _rebuild_state(self, targets: set[str] | None, until_us: int) -> set[tuple[str, str]]:
        """Window state of ``targets`` (None: all) recomputed from every span committed up to
        ``until_us``; returns its keys.

        The spans are read in partitions of about ``rebuild_rows_per_partition`` scoped rows,
        each a union of whole task/trace components (`_partitions`), so DuckDB's memory for one
        statement does not grow with the stored spans."""
        con = self._con
        self.stats["rebuilds"] += 1
        committed = f"received_at <= {_timestamp_sql(until_us)}"
        source = f"(SELECT * FROM {SPANS_TABLE} WHERE {committed})"
        if targets is not None and self._few_rows_of(targets, committed):
            con.register("_targets", pa.table({"t": sorted(targets)}))
            try:
                con.execute(f"CREATE OR REPLACE TEMP TABLE {_REBUILD_TRACES} AS SELECT DISTINCT trace_id"
                            f" FROM {SPANS_TABLE} WHERE target_id IN (SELECT t FROM _targets) AND {committed}")
            finally:
                con.unregister("_targets")
            source = (f"(SELECT * FROM {SPANS_TABLE} WHERE {committed}"
                      f" AND trace_id IN (SELECT trace_id FROM {_REBUILD_TRACES}))")
        keys: set[tuple[str, str]] = set()
        try:
            for key in list(self._book.keys):
                if targets is None or key[0] in targets:
                    self._book.drop(key)
            wanted = pa.array(sorted(targets)) if targets is not None else None
            parts = partition_spans(con, source, self._rebuild_rows_per_partition)
            try:
                parts.order_by_partition(WINDOW_INPUT_COLUMNS)
                self.stats["rebuild_partitions"] = parts.count
                self.stats["label_rounds"] = parts.rounds
                for p in range(parts.count):
                    reader = con.sql(sample_rows_sql(parts.source_of(p))).to_arrow_reader(_REBUILD_BATCH_ROWS)
                    for batch in reader:
                        chunk = pa.Table.from_batches([batch])
                        if wanted is not None:
                            chunk = chunk.filter(pc.is_in(chunk.column("target_id"), wanted))
                        keys |= self._book.apply_delta(None, chunk)
            finally:
                parts.close()
        finally:
            try:
                con.execute(f"DROP TABLE IF EXISTS {_REBUILD_TRACES}")
            except duckdb.TransactionException:  # an aborted transaction: its rollback drops it
                pass
        if targets is not None:
            self._evicted -= targets
        return keys

    def _few_rows_of(self, targets: set[str], committed: str) -> bool:
        """Whether ``targets`` hold at most a fraction of the stored spans, so that a rebuild reads
        only their traces; else it reads every span (the trace filter would cost more than it
        saves) and keeps the samples of ``targets``."""
        con = self._con
        con.register("_targets", pa.table({"t": sorted(targets)}))
        try:
            theirs, total = con.execute(
                f"SELECT count(*) FILTER (WHERE target_id IN (SELECT t FROM _targets)), count(*)"
                f" FROM {SPANS_TABLE} WHERE {committed}").fetchall()[0]
        finally:
            con.unregister("_targets")
        return theirs <= _TARGETED_REBUILD_FRACTION * total

    def _store_windows(self, keys: set[tuple[str, str]], until_us: int) -> None:
        """Write the rows of ``keys``' windows, and the watermark ``until_us``, in a transaction of their own."""
        con = self._con
        con.execute("BEGIN")
        try:
            self._write_window_rows(keys, until_us)
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise

    def _write_window_rows(self, keys: set[tuple[str, str]], until_us: int) -> None:
        """Write the rows of ``keys``' windows (inside the caller's transaction) and, while the rows
        are whole, the watermark ``until_us`` (the windows include every span committed up to it);
        a stored row with a value and another producer's evidence (a plugin's) is never replaced by
        a row of ours without one."""
        now = _dt.datetime.now(_dt.timezone.utc)
        con = self._con
        # An UPDATE costs DuckDB half an INSERT OR REPLACE (~5 against ~10 ms a pass): the rows
        # exist after a key's first write, and the upsert runs only when the UPDATE missed some.
        if self._watermark_valid:
            watermark = [int(until_us), self._definitions_digest(), now, SPANS_TABLE]
            if not _count(con.execute(_UPDATE_WATERMARK, watermark)):
                con.execute(_UPSERT_WATERMARK, watermark)
        if not keys:
            return
        windows = [w for key in sorted(keys) for w in self._book.windows(key, self.db_name, now)]
        con.register("_windows", _windows_table(windows))
        try:
            if _count(con.execute(_UPDATE_WINDOWS)) < len(windows):  # a new key, or a row another producer holds
                con.execute(_UPSERT_WINDOWS)
        finally:
            con.unregister("_windows")
        self._writes += 1
        for key in keys:
            self._recency[key] = self._writes
        self._evict()

    def _definitions_digest(self) -> str:
        if self._digest is None:
            self._digest = window_definitions_digest(self.db_name)
        return self._digest

    def _evict(self) -> None:
        """Drop the least recently written targets' state while the book is over its budget."""
        by_target: dict[str, int] = {}
        for key in self._book.keys:
            by_target[key[0]] = max(by_target.get(key[0], 0), self._recency.get(key, 0))
        total = sum(self._book.nbytes(key) for key in self._book.keys)
        for target in sorted(by_target, key=by_target.get):
            if total <= self._window_memory_bytes or len(by_target) <= 1:
                break
            for key in [k for k in self._book.keys if k[0] == target]:
                total -= self._book.nbytes(key)
                self._book.drop(key)
                self._recency.pop(key, None)
            self._evicted.add(target)
            del by_target[target]

    def write_experiment(self, manifest, *, create: bool = False):
        """Create or update an experiment manifest (``meritlens.analytics.ExperimentManifest``) in one
        transaction, after ``check_update`` against the stored one; returns it as stored (with its
        created/updated times). Raises ExperimentError for an update that rewrites the past, or with
        ``create`` when the experiment exists."""
        from meritlens.analytics._experiments import save_manifest

        with self._window_lock:
            con = self._con

            def query(sql: str) -> QueryResult:
                result = con.execute(sql)
                return QueryResult([d[0] for d in result.description], [], result.fetchall())

            con.execute("BEGIN")
            try:
                stored = save_manifest(manifest, query, con.execute, create=create)
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise
            return stored

    def record_coverage(self, report: CoverageReport) -> None:
        """Append a readiness check to `coverage_checks` (the `coverage` view shows the latest)."""
        from meritlens.analytics._readiness import coverage_row, record_coverage_sql  # pydantic: on first use

        with self._window_lock:
            self._con.execute(record_coverage_sql(), coverage_row(report))

    def write_windows(self, windows: list) -> int:
        """Insert or replace evaluated windows (`meritlens.analytics.Window`) by (target_id, metric,
        scope), all in one transaction; return how many were written."""
        if not windows:
            return 0
        rows = [[getattr(w, name) for name in WINDOW_COLUMN_NAMES] for w in windows]
        with self._window_lock:
            con = self._con
            con.execute("BEGIN")
            try:
                con.executemany(
                    f"INSERT OR REPLACE INTO {WINDOWS_TABLE} ({', '.join(WINDOW_COLUMN_NAMES)}) "
                    f"VALUES ({', '.join('?' for _ in WINDOW_COLUMN_NAMES)})",
                    rows,
                )
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise
        return len(windows)

    # --- reading ---------------------------------------------------------------------------------
    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float | None = None) -> QueryResult:
        """Run one read-only statement (see `_sqlguard`); raise ValueError naming what was refused,
        QueryTimeout when it ran past ``timeout_s``; keep at most ``max_rows`` rows. Waits (up to
        ``query_wait_s``) until the windows include every span committed before the call."""
        behind = not self._wait_before_query()
        cursor = self._open_reader()
        try:
            result = run_read_only(cursor, sql, max_rows=max_rows, timeout_s=timeout_s)
            return QueryResult(result.columns, result.types, result.rows, result.truncated, behind)
        finally:
            self._close_reader(cursor)

    def query_arrow(self, sql: str, *, batch_rows: int = 65_536) -> "ArrowQuery":
        """Run one read-only statement and stream its result as Arrow record batches.

        Use as a context manager; the reader's batches hold at most ``batch_rows`` rows."""
        check_read_only(sql)
        self._wait_before_query()
        cursor = self._open_reader()
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")  # one snapshot, and no writes, while it streams
            reader = cursor.sql(sql).to_arrow_reader(batch_rows)
        except BaseException:
            self._close_reader(cursor)
            raise
        return ArrowQuery(reader, cursor, self._close_reader)

    def _open_reader(self) -> duckdb.DuckDBPyConnection:
        with self._reader_lock:
            if self._reader is None:
                raise RuntimeError("the store is not started")
            return self._cursor(self._reader)

    @staticmethod
    def _close_reader(cursor: duckdb.DuckDBPyConnection) -> None:
        cursor.close()

    def _wait_before_query(self) -> bool:
        if self.wait_for_windows(self._query_wait_s):
            return True
        log.warning("the windows are more than %.0f s behind the stored spans; answering with them as they are",
                    self._query_wait_s)
        return False


class ArrowQuery:
    """A streaming read-only result: ``.reader`` is a pyarrow RecordBatchReader."""

    def __init__(self, reader: pa.RecordBatchReader, cursor: duckdb.DuckDBPyConnection, close_cursor):
        self.reader = reader
        self._cursor = cursor
        self._close_cursor = close_cursor

    def close(self) -> None:
        if self._cursor is None:
            return
        cursor, self._cursor = self._cursor, None
        try:
            cursor.execute("ROLLBACK")
        except duckdb.Error:
            pass
        self._close_cursor(cursor)

    def __enter__(self) -> "ArrowQuery":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_UNFINISHED_STATE_US = -1
"""The watermark of saved window state rows until the last of them is written (no watermark is negative)."""
_STATE_FLUSH_BYTES = STATE_PART_BYTES
"""Saved window state rows are inserted in statements of about this many payload bytes (the
process holds them twice meanwhile: the rows and their Arrow table)."""
_STATE_SAVE_FRACTION = 8
_STATE_SAVE_MIN_SPANS = 1_000_000
_STATE_SAVE_INTERVAL_S = 600.0
"""`SpanStore.save_window_state_if_due`: a save after 1/8 of the stored spans (at least 1,000,000,
whose rebuild takes seconds; saves every 100,000 raised the sustained benchmark's peak RSS by up to
~20 MiB), or after 10 minutes."""
_MAX_REPLAY_FRACTION = 2
"""A saved state more than half the stored spans behind the windows is not replayed: rebuilding
the targets from their spans reads little more."""


def _replay_chunks(batches: list[tuple[int, int]], start_us: int, floor_us: int, max_rows: int):
    """(after_us, until_us] ranges of whole committed batches (``batches``: (commit time, rows), in
    order, all after ``start_us``) of about ``max_rows`` rows each, none spanning ``floor_us``."""
    lo, hi, rows = start_us, None, 0
    for us, count in batches:
        if hi is not None and (rows + count > max_rows or hi <= floor_us < us):
            yield lo, hi
            lo, rows = hi, 0
        hi, rows = us, rows + count
    if hi is not None:
        yield lo, hi


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _application_mask(table: pa.Table) -> np.ndarray:
    mask = pc.and_(pc.equal(table.column("role"), ROLE_APPLICATION), pc.is_valid(table.column("target_id")))
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _application_rows(table: pa.Table, mask: np.ndarray | None = None) -> pa.Table:
    """The application rows of ``table`` (``mask``: its `_application_mask`, when known); the table
    itself when every row is one (a filter copies every column)."""
    mask = _application_mask(table) if mask is None else mask
    return table if mask.all() else table.filter(mask)


def _first_of_each_span(table: pa.Table, span_hashes: np.ndarray | None = None) -> pa.Table:
    """The table without repeated (trace_id, span_id): the first row of each is kept. The table
    itself when no span repeats; ``span_hashes`` (the rows' span key hashes, `key_hashes` column `s`) shows
    that without comparing the keys when no two hashes are equal."""
    if table.num_rows < 2:
        return table
    if span_hashes is not None and np.unique(span_hashes).size == table.num_rows:
        return table
    keys = pc.binary_join_element_wise(table.column("trace_id"), table.column("span_id"), ":")
    if pc.count_distinct(keys).as_py() == table.num_rows:
        return table
    first = pa.table({"k": keys, "i": pa.array(np.arange(table.num_rows))}).group_by("k").aggregate([("i", "min")])
    return table.take(np.sort(first.column("i_min").to_numpy()))


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read back from DuckDB in the Arrow types of the incoming batches (JSON columns as text)."""
    columns = []
    for f in schema:
        column = rows.column(f.name)
        if isinstance(column.type, pa.ExtensionType):
            column = pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)
        columns.append(column.cast(f.type))
    return pa.table(columns, schema=schema)


def _trace_task_hashes(keys) -> np.ndarray:
    """The hashes (`string_hashes`, the key filters' input) of the distinct trace and task keys
    of span rows, given their `key_hashes` columns."""
    no_task = keys.column("no_task").to_numpy(zero_copy_only=False)
    return np.concatenate([np.unique(keys.column("t").to_numpy()), np.unique(keys.column("k").to_numpy()[~no_task])])


def _row_key_hashes(keys) -> np.ndarray:
    """The locator's hashes of span rows (`key_hashes` columns): every span key, every
    distinct trace key, every distinct task key."""
    return np.concatenate([keys.column("s").to_numpy(), _trace_task_hashes(keys)])


def _timestamp_sql(us: int) -> str:
    return f"make_timestamptz({int(us)}::BIGINT)"


def _ranges_sql(ranges: list[tuple[int, int]], columns: str = "trace_id, span_id") -> str:
    """The stored spans committed in any of ``ranges`` (µs, both ends included): one read per
    range, each pruned by the min/max of `received_at` (the table is in commit order)."""
    return " UNION ALL ".join(
        f"SELECT {columns} FROM {SPANS_TABLE} WHERE received_at BETWEEN {_timestamp_sql(a)} AND {_timestamp_sql(b)}"
        for a, b in ranges)


def stamp_received_at(rows: pa.Table, received_us: int) -> pa.Table:
    """Normalized span rows as rows of `spans`: its columns, in its order, committed at ``received_us``."""
    received_at = pa.array(np.full(rows.num_rows, received_us, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC"))
    return rows.append_column("received_at", received_at).select(list(SPAN_COLUMN_NAMES))


def _concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


@dataclass(frozen=True)
class _Stored:
    """A committed batch whose rows the windows do not include yet."""

    table: pa.Table
    """Its rows' `WINDOW_INPUT_COLUMNS`."""
    keys: pa.Table
    """The rows' `key_hashes` columns, in the same order."""
    received_us: int
    """Its commit time (µs since the epoch), later than every earlier batch's."""
    follow: bool
    """False for bulk loads: only the key filter learns their keys; their windows are rebuilt."""


_WINDOW_INPUT = list(WINDOW_INPUT_COLUMNS)
_WINDOW_INPUT_SQL = ", ".join(WINDOW_INPUT_COLUMNS)
_INCOMING_SCHEMA = pa.schema([(name, _ARROW_TYPES.get(name, pa.timestamp("us", tz="UTC")))
                              for name in WINDOW_INPUT_COLUMNS])
"""The Arrow types of the batches `append` queues for the windows (received_at added to the
normalizer's rows; only `WINDOW_INPUT_COLUMNS`)."""


_KEEPS_STORED_ROW = (f"n.value IS NULL AND w.value IS NOT NULL"
                     f" AND w.evidence_media_type IS DISTINCT FROM '{EVIDENCE_MEDIA_TYPE}'")
"""A stored row with a value and another producer's evidence (a plugin's) stays over ``n``, ours without one."""
_SAME_WINDOW = " AND ".join(f'w."{c}" = n."{c}"' for c in WINDOW_KEY_COLUMNS)
_UPDATE_WINDOWS = (
    f"UPDATE {WINDOWS_TABLE} w SET "
    + ", ".join(f'"{c}" = n."{c}"' for c in WINDOW_COLUMN_NAMES if c not in WINDOW_KEY_COLUMNS)
    + f" FROM _windows n WHERE {_SAME_WINDOW} AND NOT ({_KEEPS_STORED_ROW})")
_UPSERT_WINDOWS = (f"INSERT OR REPLACE INTO {WINDOWS_TABLE} SELECT n.* FROM _windows n"
                   f" LEFT JOIN {WINDOWS_TABLE} w ON {_SAME_WINDOW} WHERE NOT ({_KEEPS_STORED_ROW})")
_WATERMARK_KEY, *_WATERMARK_FIELDS = WINDOW_WATERMARK_COLUMN_NAMES  # (store, windowed_us, definitions_digest, written_at)
_UPDATE_WATERMARK = (f"UPDATE {WINDOW_WATERMARK_TABLE} SET {', '.join(f'{c} = ?' for c in _WATERMARK_FIELDS)}"
                     f" WHERE {_WATERMARK_KEY} = ?")
_UPSERT_WATERMARK = (f"INSERT OR REPLACE INTO {WINDOW_WATERMARK_TABLE} ({', '.join(_WATERMARK_FIELDS)}, {_WATERMARK_KEY})"
                     f" VALUES ({', '.join('?' for _ in WINDOW_WATERMARK_COLUMN_NAMES)})")
"""Both take the watermark's fields, then its key (`SPANS_TABLE`)."""


def _count(result: duckdb.DuckDBPyConnection) -> int:
    """The row count an UPDATE or INSERT reports."""
    return int(result.fetchall()[0][0])


def _windows_table(windows: list) -> pa.Table:
    types = {c.name: c.sql_type.split()[0] for c in WINDOW_COLUMNS}
    arrow = {"VARCHAR": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64(),
             "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}
    return pa.table({name: pa.array([getattr(w, name) for w in windows], arrow[types[name]])
                     for name in WINDOW_COLUMN_NAMES})
