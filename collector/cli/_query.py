"""Running a read-only query where collector/cli/_resolve.py points: the DuckDB file, or a collector."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Iterator

import duckdb

from meritlens.collector.receive._auth import authorization_header
from meritlens.collector._settings import ENV_TLS_CA, SQL_PATH, SettingsError, resolve_token, staging_path
from meritlens.collector.cli._resolve import ResolveError, Source, open_file_or_explain, resolve
from meritlens.collector.store._results import QueryResult
from meritlens.collector.store._sqlguard import open_read_only, run_read_only

if TYPE_CHECKING:
    from meritlens.collector.store._store import SpanStore


class QueryError(RuntimeError):
    """The query could not be run; the message says why."""


class CollectorRefused(QueryError):
    """The collector answered with an HTTP error: ``status`` and its JSON ``payload`` (``{}`` if none)."""

    def __init__(self, message: str, status: int, payload: dict):
        super().__init__(message)
        self.status = status
        self.payload = payload


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
    body = post_json(url, SQL_PATH, {"sql": sql}, token=token, ca_file=ca_file, timeout=timeout)
    return QueryResult(
        body["columns"], body.get("types", []), [tuple(r) for r in body["rows"]], bool(body.get("truncated")),
        bool(body.get("windows_behind")),
    )


def client_ssl_context(url: str, ca_file: str | None) -> ssl.SSLContext | None:
    """How to verify an https collector: against ``ca_file`` (default: $MERITLENS_TLS_CA, else the
    system CAs); None for plain http. Raises QueryError for an unusable CA file."""
    if not url.lower().startswith("https:"):
        return None
    ca_file = ca_file or os.environ.get(ENV_TLS_CA) or None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise QueryError(f"cannot use CA file {ca_file}: {exc}") from None


def post_json(
    url: str, path: str, payload: dict, *, token: str | None = None, ca_file: str | None = None,
    timeout: float = 60.0,
) -> dict:
    """POST ``payload`` as JSON to a collector's ``path``; return the JSON reply, or raise QueryError
    with the collector's error message (or why it could not be reached).

    Sends ``token`` as a bearer token (default: $MERITLENS_TOKEN or the file $MERITLENS_TOKEN_FILE);
    verifies an https collector against ``ca_file`` (default: $MERITLENS_TLS_CA, else the system CAs)."""
    if token is None:
        try:
            token = resolve_token()
        except SettingsError as exc:
            raise QueryError(str(exc)) from None
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **authorization_header(token)},
        method="POST",
    )
    context = client_ssl_context(url, ca_file)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            payload = json.loads(exc.read())
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        raise CollectorRefused(payload.get("error") or str(exc), exc.code, payload) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise QueryError(f"no collector reachable at {url} ({reason})") from None
