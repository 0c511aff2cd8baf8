"""Running a read-only query: on the DuckDB file when it is free, else through the running collector."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Callable, TypeVar

import duckdb

from meritlens.collector._auth import authorization_header
from meritlens.collector._settings import (
    DEFAULT_URL, ENV_TLS_CA, ENV_URL, SQL_PATH, SettingsError, address_file, resolve_token,
)
from meritlens.collector._results import QueryResult
from meritlens.collector._sqlguard import open_read_only, run_read_only

if TYPE_CHECKING:
    from meritlens.collector._store import SpanStore


T = TypeVar("T")


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
    def through_collector(collector_url: str) -> QueryResult:
        return query_url(sql, collector_url, token=token, ca_file=ca_file)

    if url:
        return through_collector(url)
    if os.path.exists(db):
        # The file itself, without the store: a read needs neither its imports nor its set-up.
        try:
            con = open_read_only(db)
        except duckdb.Error as exc:
            if not _is_lock_conflict(exc):
                raise QueryError(f"cannot open {db}: {exc}") from None
        else:
            try:
                with _as_query_error():
                    result = run_read_only(con.cursor(), sql)
                return QueryResult(result.columns, result.types, result.rows, result.truncated)
            finally:
                con.close()
    return _through_the_holder(db, through_collector)


@contextlib.contextmanager
def _as_query_error():
    """A refused or failed query as a QueryError with a one-line message."""
    try:
        yield
    except ValueError as exc:
        raise QueryError(f"query refused: {exc}") from None
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from None


def _query_store(store: SpanStore, sql: str) -> QueryResult:
    with _as_query_error():
        return store.query(sql)


def on_file_or_collector(db: str, url: str | None, *, read_only: bool, on_file: Callable[[SpanStore], T],
                         through_collector: Callable[[str], T]) -> T:
    """``through_collector(url)`` when a URL is given; else ``on_file`` with the DuckDB file opened
    (read-only or not) when no other process holds it; else ``through_collector`` with the collector
    holding it (the URL it wrote beside the file, else $MERITLENS_URL, else the default URL)."""
    if url:
        return through_collector(url)
    if os.path.exists(db) and not _held_by_another_process(db):
        from meritlens.collector._store import SpanStore  # its imports (~0.3 s) only when needed

        store = SpanStore(db, read_only=read_only)
        try:
            store.start()
        except duckdb.Error as exc:
            if not _is_lock_conflict(exc):
                raise QueryError(f"cannot open {db}: {exc}") from None
        else:
            try:
                return on_file(store)
            finally:
                store.shutdown()
    return _through_the_holder(db, through_collector)


def _through_the_holder(db: str, through_collector: Callable[[str], T]) -> T:
    """``through_collector`` with the collector that holds ``db`` (the URL it wrote beside the
    file, else $MERITLENS_URL, else the default URL)."""
    fallback = _collector_url(db) or os.environ.get(ENV_URL) or DEFAULT_URL
    try:
        return through_collector(fallback)
    except QueryError as exc:
        if os.path.exists(db):
            raise
        raise QueryError(f"no database at {db} and {exc}") from None


def _held_by_another_process(db: str) -> bool:
    """Whether another process (a running collector) holds the DuckDB file ``db``."""
    try:
        duckdb.connect(db, read_only=True).close()
    except duckdb.Error as exc:
        return _is_lock_conflict(exc)
    return False


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
