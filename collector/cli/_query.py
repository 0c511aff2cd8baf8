"""Running a read-only query where collector/cli/_resolve.py points: the DuckDB file, the lake, or a
collector (collector/cli/_client.py). A query that cannot be run raises QueryError."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Iterator

import duckdb

from meritlens.collector._settings import staging_path
from meritlens.collector._paths import SQL_PATH
from meritlens.collector.cli._client import CollectorClient, QueryError
from meritlens.collector.cli._resolve import ResolveError, Source, open_file_or_explain, resolve
from meritlens.collector.store._results import QueryResult
from meritlens.collector.store._sqlguard import open_read_only, run_read_only

if TYPE_CHECKING:
    from meritlens.collector.store._store import SpanStore


def run_query(
    sql: str, *, db: str | None = None, url: str | None = None, token: str | None = None,
    ca_file: str | None = None, source: Source | None = None,
) -> QueryResult:
    """Run ``sql`` read-only where ``source`` points (default: ``resolve(db, url, ...)``, see
    collector/cli/_resolve.py). A collector is sent the token and an https collector is verified
    against the CA file (default: $MERITLENS_TLS_CA, else the system CAs)."""
    if source is None:
        try:
            source = resolve(db, url, token=token, ca_file=ca_file)
        except ResolveError as exc:
            raise QueryError(str(exc)) from None
    if source.is_collector:
        return query_url(sql, source.url, token=source.token, ca_file=source.ca_file)
    if source.is_lake:
        with opened_store(source, read_only=True) as lake:
            return query_store(lake, sql)
    # The file itself, not the store: a read needs neither the store's imports nor its set-up.
    try:
        con = open_read_only(source.db)
    except duckdb.Error as exc:
        raise QueryError(f"cannot open {source.db}: {str(exc).splitlines()[0]}") from None
    with contextlib.closing(con):
        return _query_connection(con, sql, _staged_bytes(source.db))


@contextlib.contextmanager
def _as_query_error():
    """A refused or failed query as a QueryError with a one-line message."""
    try:
        yield
    except ValueError as exc:
        raise QueryError(f"query refused: {exc}") from None
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from None


def _query_connection(con: duckdb.DuckDBPyConnection, sql: str, staged_bytes: int) -> QueryResult:
    with _as_query_error():
        result = run_read_only(con.cursor(), sql)
    return QueryResult(result.columns, result.types, result.rows, result.truncated, staged_bytes=staged_bytes)


def _staged_bytes(db: str) -> int:
    try:
        return os.path.getsize(staging_path(db))
    except OSError:
        return 0


def query_store(store: SpanStore, sql: str) -> QueryResult:
    """``sql`` on an opened store, failures as QueryError."""
    with _as_query_error():
        return store.query(sql)


@contextlib.contextmanager
def opened_store(source: Source, *, read_only: bool) -> Iterator[SpanStore]:
    """The store of a "file" source, opened (read-only or not) for the length of the block; for a
    "lake" source, the lake's reader (the same read interface; what it records is a file of its own)."""
    if source.is_lake:
        from meritlens.collector.lake._reader import LakeReader

        yield LakeReader(source.db)
        return
    from meritlens.collector.store._store import SpanStore

    store = SpanStore(source.db, read_only=read_only)
    open_file_or_explain(source.db, store.start, QueryError)
    try:
        yield store
    finally:
        store.shutdown()


def query_url(
    sql: str, url: str, *, token: str | None = None, ca_file: str | None = None, timeout: float = 60.0,
) -> QueryResult:
    """Run ``sql`` through the collector at ``url`` (POST /api/sql)."""
    with CollectorClient(url, token=token, ca_file=ca_file, timeout=timeout) as client:
        body = client.post_json(SQL_PATH, {"sql": sql})
    return QueryResult(
        body["columns"], body.get("types", []), [tuple(r) for r in body["rows"]], bool(body.get("truncated")),
        bool(body.get("windows_behind")),
    )
