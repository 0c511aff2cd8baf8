"""Reading a lake: a read-only, locked-down DuckDB in memory with the tables users query as views.

- `spans`: every published segment, each span once (the first received copy of a ``(trace_id,
  span_id)``: retries and the same export sent to two collectors are repeats);
- `windows`: the current version the windows job published (``computed_at`` says when);
- `coverage_checks`: one file per recorded readiness check (`record_coverage`);
- the other tables of a collector's file (experiments, ...) exist and are empty; the views
  (`tasks`, `coverage`, `catalogue`) are the single node's, over these.

The files are handed to DuckDB as Arrow datasets (pyarrow reads them, local or on an object store),
so user SQL runs with file access off exactly as on a DuckDB file. Each query lists the files anew:
it sees every segment published before it started.
"""

from __future__ import annotations

import datetime as _dt

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from meritlens.analytics.engine import (
    BUCKET_KEY_COLUMNS,
    COVERAGE_COLUMN_NAMES,
    COVERAGE_DDL,
    COVERAGE_TABLE,
    SPANS_DDL,
    SPANS_TABLE,
    STORE_DDL,
    WINDOWS_BY_TIME_DDL,
    WINDOWS_BY_TIME_TABLE,
    WINDOWS_DDL,
    WINDOWS_TABLE,
    WINDOW_BUCKET_STATE_DDL,
    WINDOW_BUCKET_STATE_TABLE,
)
from meritlens.collector.lake._layout import (
    COVERAGE_DIR, SPANS_DIR, Lake, coverage_schema, spans_schema, unique_stem, windows_by_time_schema, windows_schema,
)
from meritlens.collector.lake._incremental import run_state_schema, state_file
from meritlens.collector.lake._versions import current_by_time_file, current_version, current_windows_file
from meritlens.collector.store._results import QueryResult
from meritlens.collector.store._sqlguard import (
    LOCKED_DOWN, ArrowQuery, check_read_only, lock_configuration, run_read_only,
)

_OWN_TABLES = (SPANS_DDL, WINDOWS_DDL, WINDOWS_BY_TIME_DDL, WINDOW_BUCKET_STATE_DDL, COVERAGE_DDL)
"""Statements of `STORE_DDL` whose tables the lake's files stand in for."""


class LakeNotFound(ValueError):
    """The path holds no lake."""


def dedup_spans_sql(source: str) -> str:
    """The spans of ``source`` (rows of `spans`, repeats included), each (trace_id, span_id) once."""
    return (f"SELECT * FROM {source} QUALIFY row_number() OVER"
            f" (PARTITION BY trace_id, span_id ORDER BY received_at) = 1")


class LakeReader:
    """The read interface of `SpanStore` (`query`, `query_arrow`, `record_coverage`) over a lake."""

    read_only = True

    def __init__(self, lake: Lake | str, *, must_exist: bool = True):
        self.lake = lake if isinstance(lake, Lake) else Lake(lake)
        if must_exist and not self.lake.exists():
            raise LakeNotFound(f"no span lake at {self.lake.root} (no {SPANS_DIR}/ directory): start"
                               f" `meritlens serve --lake {self.lake.root}` first")

    @property
    def path(self) -> str:
        return self.lake.root

    @property
    def db_name(self) -> str:
        return self.lake.name

    # --- the store's lifecycle: nothing to open ---------------------------------------------------
    def start(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    # --- reading --------------------------------------------------------------------------------
    def connection(self) -> duckdb.DuckDBPyConnection:
        """A new locked-down in-memory DuckDB with the lake's tables and views as they are now."""
        con = duckdb.connect(config=dict(LOCKED_DOWN))
        try:
            lake = self.lake
            con.register("__lake_spans", _dataset(lake, lake.files(SPANS_DIR), spans_schema()))
            con.execute(f"CREATE VIEW {SPANS_TABLE} AS {dedup_spans_sql('__lake_spans')}")
            windows_file = current_windows_file(lake)
            con.register("__lake_windows", _dataset(lake, [windows_file] if windows_file else [], windows_schema()))
            con.execute(f"CREATE VIEW {WINDOWS_TABLE} AS SELECT * FROM __lake_windows")
            by_time_file = current_by_time_file(lake)
            con.register("__lake_by_time", _dataset(lake, [by_time_file] if by_time_file else [],
                                                    windows_by_time_schema()))
            con.execute(f"CREATE VIEW {WINDOWS_BY_TIME_TABLE} AS SELECT * FROM __lake_by_time")
            state = state_file(lake, current_version(lake))
            con.register("__lake_state", _dataset(lake, [state] if state else [], run_state_schema()))
            con.execute(f"CREATE VIEW {WINDOW_BUCKET_STATE_TABLE} AS SELECT {', '.join(BUCKET_KEY_COLUMNS)}, state"
                        " FROM __lake_state WHERE bucket_start_us IS NOT NULL")
            con.register("__lake_coverage", _dataset(lake, lake.files(COVERAGE_DIR), coverage_schema()))
            con.execute(f"CREATE VIEW {COVERAGE_TABLE} AS SELECT * FROM __lake_coverage")
            for statement in STORE_DDL:
                if statement not in _OWN_TABLES:
                    con.execute(statement)
            lock_configuration(con)
        except BaseException:
            con.close()
            raise
        return con

    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float | None = None,
              wait_s: float | None = None) -> QueryResult:
        """Run one read-only statement (see `_sqlguard`); ValueError names what was refused."""
        check_read_only(sql)
        con = self.connection()
        try:
            result = run_read_only(con, sql, max_rows=max_rows, timeout_s=timeout_s)
        finally:
            con.close()
        return QueryResult(result.columns, result.types, result.rows, result.truncated)

    def query_arrow(self, sql: str, *, batch_rows: int = 65_536) -> ArrowQuery:
        check_read_only(sql)
        con = self.connection()
        try:
            reader = con.sql(sql).to_arrow_reader(batch_rows)
        except BaseException:
            con.close()
            raise
        return ArrowQuery(reader, con)

    def staged_rows(self) -> int:
        return 0

    # --- writing what readers record ----------------------------------------------------------------
    def record_coverage(self, report) -> None:
        """A readiness check as a file of its own under ``coverage/`` (the `coverage` view shows the latest)."""
        from meritlens.analytics.engine import coverage_row

        row = dict(zip(COVERAGE_COLUMN_NAMES, coverage_row(report)))
        checked = row["checked_at"]
        if isinstance(checked, _dt.datetime) and checked.tzinfo is None:
            row["checked_at"] = checked.replace(tzinfo=_dt.timezone.utc)
        table = pa.Table.from_pylist([row], schema=coverage_schema())
        self.lake.publish_parquet(COVERAGE_DIR, unique_stem() + ".parquet", table)

    def write_windows(self, windows: list) -> int:
        raise ValueError(f"the lake {self.lake.root} takes windows only from `meritlens lake windows`;"
                         " store evaluated windows in a DuckDB file")


def _dataset(lake: Lake, files: list[str], schema: pa.Schema):
    """The files as one Arrow dataset (an empty table when there are none)."""
    if not files:
        return schema.empty_table()
    return pads.dataset(files, schema=schema, format="parquet", filesystem=lake.fs)
