"""Running a read-only query: on the DuckDB file when it is free, else through the running collector."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, TypeVar

import duckdb

from meritlens.collector.receive._auth import authorization_header
from meritlens.collector._settings import (
    DEFAULT_URL, ENV_TLS_CA, ENV_URL, SQL_PATH, SettingsError, address_file, resolve_token, staging_path,
)
from meritlens.collector.store._results import QueryResult
from meritlens.collector.store._sqlguard import open_read_only, run_read_only

if TYPE_CHECKING:
    from meritlens.collector.store._store import SpanStore


T = TypeVar("T")
H = TypeVar("H")


class QueryError(RuntimeError):
    """The query could not be run; the message says why."""


class CollectorRefused(QueryError):
    """The collector answered with an HTTP error: ``status`` and its JSON ``payload`` (``{}`` if none)."""

    def __init__(self, message: str, status: int, payload: dict):
        super().__init__(message)
        self.status = status
        self.payload = payload


def _is_lock_conflict(exc: duckdb.Error) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


def run_query(
    sql: str, *, db: str, url: str | None = None, token: str | None = None, ca_file: str | None = None,
) -> QueryResult:
    """Run ``sql`` read-only. With ``url`` go through that collector; otherwise open ``db`` read-only,
    and fall back to the collector holding it (the URL it wrote beside the file, else $MERITLENS_URL,
    else http://127.0.0.1:4318) when another process holds the file or it is not here.

    A collector is sent ``token`` (default: $MERITLENS_TOKEN or the file $MERITLENS_TOKEN_FILE) and
    an https collector is verified against ``ca_file`` (default: $MERITLENS_TLS_CA, else the system CAs)."""
    # The file itself, not the store: a read needs neither the store's imports nor its set-up.
    return _on_file_or_collector(
        db, url, open_file=lambda: contextlib.closing(open_read_only(db)),
        on_file=lambda con: _query_connection(con, sql, _staged_bytes(db)),
        through_collector=lambda collector_url: query_url(sql, collector_url, token=token, ca_file=ca_file),
    )


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


def _query_store(store: SpanStore, sql: str) -> QueryResult:
    with _as_query_error():
        return store.query(sql)


def on_file_or_collector(db: str, url: str | None, *, read_only: bool, on_file: Callable[[SpanStore], T],
                         through_collector: Callable[[str], T]) -> T:
    """``through_collector(url)`` when a URL is given; else ``on_file`` with the DuckDB file opened
    (read-only or not) when no other process holds it; else ``through_collector`` with the collector
    holding it (the URL it wrote beside the file, else $MERITLENS_URL, else the default URL)."""
    return _on_file_or_collector(db, url, open_file=lambda: _opened_store(db, read_only), on_file=on_file,
                                 through_collector=through_collector)


@contextlib.contextmanager
def _opened_store(db: str, read_only: bool) -> Iterator[SpanStore]:
    open_read_only(db).close()  # another process holding the file shows here, before the store's imports (~0.3 s)
    from meritlens.collector.store._store import SpanStore

    store = SpanStore(db, read_only=read_only)
    store.start()
    try:
        yield store
    finally:
        store.shutdown()


def _on_file_or_collector(db: str, url: str | None, *, open_file: Callable[[], ContextManager[H]],
                          on_file: Callable[[H], T], through_collector: Callable[[str], T]) -> T:
    """``through_collector(url)`` when a URL is given; else ``on_file`` with what ``open_file``
    opens, unless another process holds the file (a lock conflict); else ``through_collector``
    with the collector holding it (the URL it wrote beside the file, else $MERITLENS_URL, else
    the default URL)."""
    if url:
        return through_collector(url)
    if os.path.exists(db):
        with contextlib.ExitStack() as stack:
            try:
                opened = stack.enter_context(open_file())
            except duckdb.Error as exc:
                if not _is_lock_conflict(exc):
                    raise QueryError(f"cannot open {db}: {exc}") from None
            else:
                return on_file(opened)
    fallback = _collector_url(db) or os.environ.get(ENV_URL) or DEFAULT_URL
    try:
        return through_collector(fallback)
    except QueryError as exc:
        if os.path.exists(db):
            raise
        raise QueryError(f"no database at {db} and {exc}") from None


def _collector_url(db: str) -> str | None:
    try:
        with open(address_file(db), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


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
