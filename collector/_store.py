"""The span store: DuckDB behind one small interface.

Write a batch idempotently, recompute the windows of the keys it touched, run a read-only
query. A distributed engine can later stand behind the same three calls.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from meritlens.analytics._readiness import CoverageReport, coverage_row, record_coverage_sql
from meritlens.analytics._schema import SPAN_COLUMN_NAMES, SPANS_TABLE, WINDOW_COLUMN_NAMES, WINDOWS_TABLE
from meritlens.analytics._views import STORE_DDL
from meritlens.analytics._windows import SCOPE_ALL, all_keys_sql, refresh_windows_sql
from meritlens.collector._sqlguard import check_read_only, run_read_only
from meritlens.instrumentation.conventions import ROLE_APPLICATION

log = logging.getLogger("meritlens.collector.store")

_CONFIG = {
    # Queries may not touch files, URLs or extensions; Arrow batches are registered explicitly.
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
_TOUCHED = "_touched_keys"


@dataclass(frozen=True)
class WriteResult:
    received: int
    inserted: int

    @property
    def duplicates(self) -> int:
        return self.received - self.inserted


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    truncated: bool = False
    """True when a row limit cut the result."""


def touched_keys(table: pa.Table) -> set[tuple[str, str]]:
    """The (target_id, scope) window keys that a batch of span rows can change."""
    keys: set[tuple[str, str]] = set()
    targets = table.column("target_id").to_pylist()
    roles = table.column("role").to_pylist()
    assessments = table.column("assessment_id").to_pylist()
    for target, role, assessment in zip(targets, roles, assessments):
        if target is None or role != ROLE_APPLICATION:
            continue
        keys.add((target, SCOPE_ALL))
        if assessment is not None:
            keys.add((target, assessment))
    return keys


class SpanStore:
    """A DuckDB file holding `spans` and `windows`. One writer; readers use their own cursors."""

    def __init__(self, path: str, *, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        self._con: duckdb.DuckDBPyConnection | None = None
        self._write_lock = threading.Lock()
        self._reader: duckdb.DuckDBPyConnection | None = None
        self._reader_lock = threading.Lock()

    @property
    def db_name(self) -> str:
        return os.path.basename(self.path)

    def start(self) -> None:
        self._con = duckdb.connect(self.path, read_only=self.read_only, config=dict(_CONFIG))
        if not self.read_only:
            for statement in STORE_DDL:
                self._con.execute(statement)
        self._con.execute("SET lock_configuration = true")
        self._reader = self._con.cursor()

    def shutdown(self) -> None:
        if self._con is not None:
            self._reader.close()
            if not self.read_only:
                try:
                    self._con.execute("CHECKPOINT")
                except duckdb.Error:
                    log.exception("checkpoint at shutdown failed; the WAL still holds every commit")
            self._con.close()
            self._con = None

    # --- writing ---------------------------------------------------------------------------------
    def write(self, table: pa.Table, *, refresh_windows: bool = True) -> WriteResult:
        """Insert span rows, ignoring any (trace_id, span_id) already stored; commit; then
        recompute the windows of the keys the rows touch. Returns once both are durable.

        A bulk loader may pass ``refresh_windows=False`` and call `refresh_windows` once at the end."""
        received_at = pa.array(
            [_dt.datetime.now(_dt.timezone.utc)] * table.num_rows, type=pa.timestamp("us", tz="UTC")
        )
        table = table.append_column("received_at", received_at).select(list(SPAN_COLUMN_NAMES))
        with self._write_lock:
            con = self._con
            con.register("_incoming", table)
            try:
                con.execute("BEGIN")
                inserted = con.execute(f"INSERT OR IGNORE INTO {SPANS_TABLE} SELECT * FROM _incoming").fetchone()[0]
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise
            finally:
                con.unregister("_incoming")
            keys = touched_keys(table)
            if keys and refresh_windows:
                self._refresh(keys)
        return WriteResult(received=table.num_rows, inserted=int(inserted))

    def refresh_windows(self, keys: set[tuple[str, str]]) -> None:
        """Recompute the windows of the given (target_id, scope) keys."""
        if keys:
            with self._write_lock:
                self._refresh(keys)

    def refresh_all_windows(self) -> int:
        """Recompute every window from the stored spans (at start-up: windows equal a from-scratch run)."""
        with self._write_lock:
            keys = {tuple(row) for row in self._con.execute(all_keys_sql()).fetchall()}
            if keys:
                self._refresh(keys)
            return len(keys)

    def _refresh(self, keys: set[tuple[str, str]]) -> None:
        con = self._con
        touched = pa.table({"target_id": [k[0] for k in keys], "scope": [k[1] for k in keys]})
        con.register(_TOUCHED, touched)
        try:
            con.execute("BEGIN")
            con.execute(refresh_windows_sql(_TOUCHED, self.db_name))
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
        finally:
            con.unregister(_TOUCHED)

    def write_experiment(self, manifest, *, create: bool = False):
        """Create or update an experiment manifest (``meritlens.analytics.ExperimentManifest``) in one
        transaction, after ``check_update`` against the stored one; returns it as stored (with its
        created/updated times). Raises ExperimentError for an update that rewrites the past, or with
        ``create`` when the experiment exists."""
        from meritlens.analytics._experiments import save_manifest

        with self._write_lock:
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
        with self._write_lock:
            self._con.execute(record_coverage_sql(), coverage_row(report))
    def write_windows(self, windows: list) -> int:
        """Insert or replace evaluated windows (`meritlens.analytics.Window`) by (target_id, metric,
        scope), all in one transaction; return how many were written."""
        if not windows:
            return 0
        rows = [[getattr(w, name) for name in WINDOW_COLUMN_NAMES] for w in windows]
        with self._write_lock:
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
        QueryTimeout when it ran past ``timeout_s``; keep at most ``max_rows`` rows."""
        with self._reader_lock:
            cursor = self._reader.cursor()
        try:
            result = run_read_only(cursor, sql, max_rows=max_rows, timeout_s=timeout_s)
            return QueryResult(result.columns, result.types, result.rows, result.truncated)
        finally:
            cursor.close()

    def query_arrow(self, sql: str, *, batch_rows: int = 65_536) -> "ArrowQuery":
        """Run one read-only statement and stream its result as Arrow record batches.

        Use as a context manager; the reader's batches hold at most ``batch_rows`` rows."""
        check_read_only(sql)
        with self._reader_lock:
            cursor = self._reader.cursor()
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")  # one snapshot, and no writes, while it streams
            reader = cursor.sql(sql).to_arrow_reader(batch_rows)
        except BaseException:
            cursor.close()
            raise
        return ArrowQuery(reader, cursor)


class ArrowQuery:
    """A streaming read-only result: ``.reader`` is a pyarrow RecordBatchReader."""

    def __init__(self, reader: pa.RecordBatchReader, cursor: duckdb.DuckDBPyConnection):
        self.reader = reader
        self._cursor = cursor

    def close(self) -> None:
        try:
            self._cursor.execute("ROLLBACK")
        except duckdb.Error:
            pass
        self._cursor.close()

    def __enter__(self) -> "ArrowQuery":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
