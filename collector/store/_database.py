"""Opening the collector's DuckDB file: its settings, its row group size, its tables and views, and
the one migration files of earlier versions need."""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb

from meritlens.analytics.engine import (
    ADDED_WINDOW_COLUMNS,
    SPANS_TABLE,
    STORE_DDL,
    WINDOW_COLUMNS,
    WINDOW_STATE_COLUMN_NAMES,
    WINDOW_STATE_TABLE,
    WINDOW_WATERMARK_TABLE,
    WINDOWS_TABLE,
    sql_string,
)
from meritlens.collector.store._sqlguard import LOCKED_DOWN, lock_configuration

log = logging.getLogger("meritlens.collector.store")

_OLD_INDEXES = ("spans_trace_id", "spans_task_id")
"""B-tree indexes of earlier versions. DuckDB holds such indexes whole in memory, so they grew with
every stored span until the memory limit failed a commit; they are dropped at start."""


@dataclass(frozen=True)
class DatabaseOptions:
    """DuckDB's settings for the store (None: DuckDB's own default)."""

    memory_limit_bytes: int | None = None
    threads: int | None = None
    checkpoint_wal_bytes: int | None = None
    row_group_rows: int | None = None
    """Rows per row group of a file the store writes; a multiple of 2048 (DuckDB's vector size)."""

    def config(self) -> dict:
        config = dict(LOCKED_DOWN)  # queries may not touch files, URLs or extensions
        if self.memory_limit_bytes is not None:
            config["memory_limit"] = f"{self.memory_limit_bytes // (1024 * 1024)}MiB"
        if self.checkpoint_wal_bytes is not None:
            config["checkpoint_threshold"] = f"{self.checkpoint_wal_bytes}B"
        if self.threads is not None:
            config["threads"] = self.threads
        return config


class Database:
    """One DuckDB database, opened once; every user takes a `cursor` of its own."""

    def __init__(self, path: str, options: DatabaseOptions, *, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        self._catalog: str | None = None
        self.con = self._connect(options.config(), options.row_group_rows)
        lock_configuration(self.con)

    def _connect(self, config: dict, row_group_rows: int | None) -> duckdb.DuckDBPyConnection:
        """A writable file is attached to an in-memory database with `ROW_GROUP_SIZE` (which only
        `ATTACH` takes) and made the default catalog. A file whose default alias is taken
        (``memory.duckdb``) is opened directly, with DuckDB's row group size."""
        if self.read_only or self.path == ":memory:" or row_group_rows is None:
            return duckdb.connect(self.path, read_only=self.read_only, config=config)
        locked = {key: config.pop(key) for key in LOCKED_DOWN if key in config}  # they forbid ATTACH
        # an in-memory database spills to `.tmp` in the working directory: spill beside the file instead
        con = duckdb.connect(config={**config, "temp_directory": f"{self.path}.tmp"})
        try:
            try:
                con.execute(f"ATTACH {sql_string(self.path)} (ROW_GROUP_SIZE {row_group_rows})")
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

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the database, with its file as the default catalog."""
        cursor = self.con.cursor()
        if self._catalog is not None:
            try:
                cursor.execute(f"USE {self._catalog}")
            except BaseException:
                cursor.close()
                raise
        return cursor

    def create_tables(self) -> None:
        self._drop_old_window_state()
        for statement in STORE_DDL:
            self.con.execute(statement)
        self._drop_old_indexes()
        self._add_window_columns()

    def _drop_old_window_state(self) -> None:
        """A window state table of another layout (earlier versions) is dropped with its watermark:
        the windows are then recomputed once from the spans."""
        columns = tuple(name for (name,) in self.con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = current_schema()"
            " AND database_name = current_database() ORDER BY column_index", [WINDOW_STATE_TABLE]).fetchall())
        if columns and columns != WINDOW_STATE_COLUMN_NAMES:
            log.info("dropping the window state of an earlier version; the windows are recomputed once")
            self.con.execute(f"DROP TABLE {WINDOW_STATE_TABLE}")
            self.con.execute(f"DROP TABLE IF EXISTS {WINDOW_WATERMARK_TABLE}")

    def _add_window_columns(self) -> None:
        """Files of earlier versions lack the windows' last columns: add them (NULL until recomputed)."""
        types = {c.name: c.sql_type for c in WINDOW_COLUMNS}
        for name in ADDED_WINDOW_COLUMNS:
            self.con.execute(f"ALTER TABLE {WINDOWS_TABLE} ADD COLUMN IF NOT EXISTS {name} {types[name]}")

    def _drop_old_indexes(self) -> None:
        """Files of earlier versions have a primary key and two indexes on `spans`: drop them (the
        table is copied once to drop its key; a table cannot lose a constraint in place)."""
        con = self.con
        for name in _OLD_INDEXES:
            con.execute(f"DROP INDEX IF EXISTS {name}")
        keyed = con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND constraint_type = 'PRIMARY KEY'",
            [SPANS_TABLE]).fetchall()[0][0]
        if not keyed:
            return
        log.info("copying %s once to drop the primary key of earlier versions", SPANS_TABLE)
        with transaction(con):
            con.execute(f"CREATE TABLE {SPANS_TABLE}__copy AS SELECT * FROM {SPANS_TABLE}")
            con.execute(f"DROP TABLE {SPANS_TABLE}")
            con.execute(f"ALTER TABLE {SPANS_TABLE}__copy RENAME TO {SPANS_TABLE}")
        for statement in STORE_DDL:  # views over the new table
            con.execute(statement)
        con.execute("CHECKPOINT")

    def close(self, *, checkpoint: bool) -> None:
        if checkpoint and not self.read_only:
            try:
                self.con.execute("CHECKPOINT")
            except duckdb.Error:
                log.exception("checkpoint at shutdown failed; the WAL still holds every commit")
        self.con.close()


class transaction:
    """``with transaction(con):`` BEGIN ... COMMIT, rolled back on any exception, a failed COMMIT's
    included. A transaction that a failed statement left open (DuckDB refuses every statement of an
    aborted transaction until a ROLLBACK) is rolled back before this one begins."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con

    def __enter__(self) -> duckdb.DuckDBPyConnection:
        try:
            self._con.execute("BEGIN")
        except duckdb.Error:
            rollback(self._con)
            self._con.execute("BEGIN")
        return self._con

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            try:
                self._con.execute("COMMIT")
            except BaseException:
                rollback(self._con)
                raise
        else:
            rollback(self._con)


@contextlib.contextmanager
def rollback_on_error(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Statements outside `transaction` whose failure must not leave ``con`` refusing the next ones: a
    DuckDB error inside a transaction a caller left open aborts it until a ROLLBACK."""
    try:
        yield con
    except BaseException:
        rollback(con)
        raise


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def checkpoint_now(cursor: duckdb.DuckDBPyConnection) -> None:
    """Checkpoint, so that the blocks of deleted rows are reused now (a deletion writes little WAL, so
    the automatic checkpoint may be far off); skipped while DuckDB cannot (the next caller tries again)."""
    try:
        cursor.execute("CHECKPOINT")
    except duckdb.Error as exc:
        log.debug("checkpoint skipped: %s", exc)


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def now_us() -> int:
    """µs since the epoch: the unit of every time the collector keeps."""
    return int(utc_now().timestamp() * 1_000_000)


def timestamp_sql(us: int) -> str:
    return f"make_timestamptz({int(us)}::BIGINT)"


def count(result: duckdb.DuckDBPyConnection) -> int:
    """The row count an UPDATE or INSERT reports."""
    return int(result.fetchall()[0][0])
