"""Refusing anything but a single read statement on the SQL endpoint and CLI."""

from __future__ import annotations

import duckdb

_READ_TYPES = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class QueryRefused(ValueError):
    """The statement is not a single read; the message says what was refused."""


def check_read_only(sql: str) -> None:
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
        name = str(kind).rsplit(".", 1)[-1]
        raise QueryRefused(f"only read statements (SELECT, WITH, EXPLAIN) are allowed, got {name}")
