"""Read-only SQL for the SQL endpoint and the CLI: what may run, and how it runs.

Three layers, each enough on its own for the common attacks:

1. `check_read_only` parses the text and refuses anything but one SELECT/WITH/EXPLAIN of a read
   (so INSERT, ATTACH, COPY, INSTALL/LOAD, PRAGMA, SET, CALL and `EXPLAIN ANALYZE <write>` get a
   clear message);
2. `run_read_only` runs the statement inside `BEGIN TRANSACTION READ ONLY`, so DuckDB itself
   refuses any write that slipped through;
3. every connection that runs user SQL is opened with `LOCKED_DOWN` and its configuration then
   locked (`lock_configuration`), so file and URL readers (`read_csv('/etc/passwd')`, httpfs),
   extension loading and settings changes fail inside DuckDB.

`run_read_only` also interrupts a statement that runs past its timeout and returns at most
``max_rows`` rows, saying when it cut the result.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    import pyarrow as pa

LOCKED_DOWN = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
"""DuckDB settings of every connection that runs user SQL: no file or URL readers, no extension
loading (Arrow batches are registered explicitly)."""

_READ_TYPES = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
_EXPLAIN_PREFIX = re.compile(r"^\s*explain\s+(?:analy[sz]e\s+|\([^)]*\)\s*)?", re.IGNORECASE)


class QueryRefused(ValueError):
    """The statement is not a single read; the message says what was refused."""


class QueryTimeout(RuntimeError):
    """The statement ran longer than its timeout and was interrupted."""


@dataclass(frozen=True)
class ReadResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    truncated: bool


def _kind_name(kind) -> str:
    return str(kind).rsplit(".", 1)[-1]


def lock_configuration(con: duckdb.DuckDBPyConnection) -> None:
    """Forbid any later change of ``con``'s settings (`SET`, `RESET`): call it once the owner has
    set what it needs."""
    con.execute("SET lock_configuration = true")


def open_read_only(path: str) -> duckdb.DuckDBPyConnection:
    """The DuckDB file at ``path``, opened read-only for user SQL (`LOCKED_DOWN`, settings locked).
    Raises duckdb.Error when it cannot be opened (another process holding it among the reasons)."""
    con = duckdb.connect(path, read_only=True, config=dict(LOCKED_DOWN))
    try:
        lock_configuration(con)
    except BaseException:
        con.close()
        raise
    return con


def check_read_only(sql: str) -> None:
    """Raise QueryRefused unless ``sql`` is exactly one read statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(f"cannot parse SQL: {exc}") from None
    if not statements:
        raise QueryRefused("no SQL statement given")
    if len(statements) > 1:
        raise QueryRefused(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type
    if kind not in _READ_TYPES:
        raise QueryRefused(f"only read statements (SELECT, WITH, EXPLAIN) are allowed, got {_kind_name(kind)}")
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _EXPLAIN_PREFIX.sub("", statements[0].query, count=1)
        try:
            inner_statements = duckdb.extract_statements(inner)
        except duckdb.Error:
            return  # an EXPLAIN form this check does not know; the read-only transaction still guards it
        if inner_statements and inner_statements[0].type != duckdb.StatementType.SELECT:
            raise QueryRefused(
                f"EXPLAIN of a {_kind_name(inner_statements[0].type)} statement is refused: only reads may be explained"
            )


def run_read_only(
    cursor: duckdb.DuckDBPyConnection, sql: str, *, max_rows: int | None = None, timeout_s: float | None = None,
    prepare: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> ReadResult:
    """Run one checked read statement on ``cursor`` (a connection of its own) in a read-only
    transaction; interrupt it after ``timeout_s``; keep at most ``max_rows`` rows. ``prepare`` is
    called inside the transaction first (the store binds its `spans` view there)."""
    check_read_only(sql)
    timer = None
    timed_out = threading.Event()
    if timeout_s is not None:
        def interrupt() -> None:
            timed_out.set()
            cursor.interrupt()

        timer = threading.Timer(timeout_s, interrupt)
        timer.daemon = True
    cursor.execute("BEGIN TRANSACTION READ ONLY")
    try:
        if timer is not None:
            timer.start()
        try:
            if prepare is not None:
                prepare(cursor)
            result = cursor.execute(sql)
            description = result.description or []
            if max_rows is None:
                rows = result.fetchall()
                truncated = False
            else:
                rows = result.fetchmany(max_rows + 1)
                truncated = len(rows) > max_rows
                rows = rows[:max_rows]
        except duckdb.Error:
            if timed_out.is_set():
                raise QueryTimeout(f"the query ran longer than {timeout_s:g} s and was stopped") from None
            raise
    finally:
        if timer is not None:
            timer.cancel()
        try:
            cursor.execute("ROLLBACK")
        except duckdb.Error:
            pass
    return ReadResult(
        columns=[d[0] for d in description],
        types=[str(d[1]) for d in description],
        rows=rows,
        truncated=truncated,
    )


class ArrowQuery:
    """A streaming read-only result: ``.reader`` is a pyarrow RecordBatchReader."""

    def __init__(self, reader: pa.RecordBatchReader, cursor: duckdb.DuckDBPyConnection):
        self.reader = reader
        self._cursor = cursor

    def close(self) -> None:
        if self._cursor is None:
            return
        cursor, self._cursor = self._cursor, None
        try:
            cursor.execute("ROLLBACK")
        except duckdb.Error:
            pass
        cursor.close()

    def __enter__(self) -> ArrowQuery:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
