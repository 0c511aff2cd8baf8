"""The OTLP/HTTP receiver and the read-only SQL endpoint (aiohttp)."""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import uuid
import zlib
from typing import Callable

import aiohttp
from aiohttp import web
from google.rpc import code_pb2

from meritlens.analytics.engine import WindowRejected, windows_from_json
from meritlens.collector.process import _otlp
from meritlens.collector.receive._auth import AUTHORIZATION, BearerToken
from meritlens.collector.receive._ingest import Ingest, IngestError, Reservation, bad_request, overloaded, too_large
from meritlens.collector.receive._refusals import RefusalLog
from meritlens.collector.serve import _health
from meritlens.collector.store._results import json_default
from meritlens.collector._settings import (
    DASHBOARD_PATH, EXPERIMENTS_PATH, HEALTH_PATH, READINESS_PATH, SQL_PATH, STATIC_PATH_PREFIX, TRACES_PATH,
    WINDOWS_PATH,
)
from meritlens.collector.store._sqlguard import QueryRefused, QueryTimeout
from meritlens.collector.store._store import SpanStore

log = logging.getLogger("meritlens.collector.http")

_CHUNK = 64 * 1024
_SQL_BODY_LIMIT = 1024 * 1024


class _Inflater:
    """Streaming gzip/deflate decompression that never produces more than the limit (plus one byte).

    Several gzip members in a row are one body (RFC 1952); bytes after a deflate stream, or
    after the last gzip member that are not another member, are an error — never ignored.
    """

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._wbits = 31 if encoding == "gzip" else 15
        self._obj = zlib.decompressobj(wbits=self._wbits)
        self._seen_input = False

    def feed(self, data: bytes, out: bytearray, limit: int) -> None:
        while data:
            if self._obj.eof:
                if self._wbits != 31:
                    raise bad_request("data follows the end of the deflate stream")
                self._obj = zlib.decompressobj(wbits=self._wbits)
            self._seen_input = True
            try:
                out += self._obj.decompress(data, limit + 1 - len(out))
            except zlib.error as exc:
                raise bad_request(f"body is not valid {self.encoding} data: {exc}") from None
            if len(out) > limit:
                return
            data = self._obj.unused_data if self._obj.eof else self._obj.unconsumed_tail

    def finish(self, out: bytearray, limit: int) -> None:
        try:
            out += self._obj.flush()
        except zlib.error as exc:
            raise bad_request(f"body is not valid {self.encoding} data: {exc}") from None
        if self._seen_input and not self._obj.eof and len(out) <= limit:
            raise bad_request(f"{self.encoding} body is truncated")


async def read_body(request: web.Request, limit: int, reservation: Reservation) -> bytes:
    """Read the body, decompressing as it streams: at most ``limit`` (+1) bytes are ever held, and
    every byte held is first taken from ``reservation`` (an overloaded IngestError when it cannot)."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
        if request.content_length is not None:
            if request.content_length > limit:
                raise too_large(f"request body of {request.content_length} bytes exceeds the limit of {limit} bytes")
            reservation.ensure(request.content_length)
    elif encoding in ("gzip", "x-gzip", "deflate"):
        inflater = _Inflater("deflate" if encoding == "deflate" else "gzip")
    else:
        raise IngestError(
            415, code_pb2.INVALID_ARGUMENT, f"unsupported Content-Encoding {encoding!r}; use gzip, deflate or identity"
        )
    out = bytearray()
    try:
        async for chunk in request.content.iter_chunked(_CHUNK):
            if inflater is None:
                out += chunk
            else:
                inflater.feed(chunk, out, limit)
            if len(out) > limit:
                raise too_large(f"request body exceeds the limit of {limit} bytes after decompression")
            reservation.ensure(len(out))
    except (aiohttp.ClientPayloadError, aiohttp.http_exceptions.HttpProcessingError, ConnectionError, EOFError) as exc:
        raise bad_request(f"the request body could not be read completely: {exc}") from None
    if inflater is not None:
        inflater.finish(out, limit)
        if len(out) > limit:
            raise too_large(f"request body exceeds the limit of {limit} bytes after decompression")
        reservation.ensure(len(out))
    return bytes(out)


def _status_response(media_type: str, err: IngestError, headers: dict | None = None) -> web.Response:
    if err.overload:
        _health.overloaded(err.overload)
    headers = dict(headers or {})
    if err.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(err.retry_after_s)))
    return web.Response(
        status=err.http_status,
        body=_otlp.encode_status(
            media_type, err.http_status, err.message, rpc_code=err.rpc_code, retry_after_s=err.retry_after_s
        ),
        content_type=media_type,
        headers=headers,
    )


def _reply_type(request: web.Request) -> str:
    media_type = (request.content_type or "").lower()
    return media_type if media_type in _otlp.MEDIA_TYPES else _otlp.JSON


def _public_page(request: web.Request) -> bool:
    """The dashboard page and its static files hold no data; the page then sends the token itself."""
    return request.method in ("GET", "HEAD") and (
        request.path == DASHBOARD_PATH or request.path.startswith(STATIC_PATH_PREFIX))


def _reason(response: web.StreamResponse) -> str:
    """Why a response refused its request, read back from its body (OTLP Status or {"error": ...})."""
    body = getattr(response, "body", None)
    if not isinstance(body, (bytes, bytearray)):
        return response.reason or ""
    if response.content_type == _otlp.PROTOBUF:
        from google.rpc import status_pb2

        try:
            return status_pb2.Status.FromString(bytes(body)).message or response.reason
        except Exception:  # noqa: BLE001 - only for the log line
            return response.reason or ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        return str(parsed.get("error") or parsed.get("message") or parsed)
    return str(parsed)


class HttpReceiver:
    """Routes: POST /v1/traces (OTLP), POST /api/sql (read-only SQL), POST /api/readiness,
    POST /api/windows, POST /api/experiments, GET /healthz.

    With a token configured, every route needs `Authorization: Bearer <token>`, except GET of the
    dashboard page and its static files (they hold no data; the page sends the token on its calls).
    """

    def __init__(
        self, ingest: Ingest, store: SpanStore, *, max_body_bytes: int, token: BearerToken,
        sql_max_rows: int, sql_timeout_s: float, sql_concurrency: int = 4,
        window_lag: Callable[[], tuple[int, int]] = lambda: (0, 0),
    ):
        self._ingest = ingest
        self._store = store
        self._window_lag = window_lag
        """(batches, rows) committed that the windows do not include yet."""
        self._max_body_bytes = max_body_bytes
        self._token = token
        self._sql_max_rows = sql_max_rows
        self._sql_timeout_s = sql_timeout_s
        self._sql_slots = asyncio.Semaphore(sql_concurrency)
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._draining = False
        self.refusals = RefusalLog()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._track, self._auth], client_max_size=_SQL_BODY_LIMIT)
        app.router.add_route("*", TRACES_PATH, self.traces)
        app.router.add_route("*", SQL_PATH, self.sql)
        app.router.add_get(HEALTH_PATH, self.health)
        app.router.add_route("*", READINESS_PATH, self._on_first_request("serve._evidence", "readiness_handler"))
        app.router.add_route("*", WINDOWS_PATH, self.windows)
        app.router.add_route("*", EXPERIMENTS_PATH, self._on_first_request("cli._experiment_io", "experiments_handler"))
        return app

    def _on_first_request(self, module: str, factory: str):
        """A handler made by ``factory(store)`` of ``module``, imported when the route is first
        asked for (off the event loop): profiles, readiness and experiments need pydantic and
        the analytics models, which a collector that only receives spans never loads."""
        handler = None

        async def route(request: web.Request) -> web.StreamResponse:
            nonlocal handler
            if handler is None:
                loaded = await asyncio.get_running_loop().run_in_executor(
                    None, importlib.import_module, f"meritlens.collector.{module}")
                handler = getattr(loaded, factory)(self._store)
            return await handler(request)

        return route

    async def drain(self, timeout: float) -> bool:
        """Refuse new requests (503, Connection: close) and wait up to ``timeout`` seconds for the
        requests in progress to be answered; True when none is left.

        aiohttp's own shutdown drops body bytes that arrive after it starts, so a request still
        uploading would be lost; this lets it finish first."""
        self._draining = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("%d requests still in progress after %gs; closing them", self._active, timeout)
            return False
        return True

    @web.middleware
    async def _track(self, request: web.Request, handler):
        if self._draining:
            err = overloaded("the collector is shutting down", "shutting_down")
            if request.path == TRACES_PATH:
                response = _status_response(_reply_type(request), err)
            else:
                response = web.json_response({"error": err.message}, status=503,
                                             headers={"Retry-After": str(err.retry_after_s)})
            response.force_close()
            return response
        self._active += 1
        self._idle.clear()
        try:
            response = await handler(request)
            if response.status >= 400 and response.status != 404:
                self.refusals.note(response.status, f"{request.method} {request.path}", _reason(response),
                                   request.remote)
            return response
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if self._token.accepts(request.headers.get(AUTHORIZATION)) or _public_page(request):
            return await handler(request)
        message = "missing or wrong bearer token: send 'Authorization: Bearer <token>'"
        headers = {"WWW-Authenticate": 'Bearer realm="meritlens"'}
        if request.path == TRACES_PATH:
            return _status_response(_reply_type(request), IngestError(401, code_pb2.UNAUTHENTICATED, message), headers)
        return web.json_response({"error": message}, status=401, headers=headers)

    async def health(self, request: web.Request) -> web.Response:
        batches, rows = self._window_lag()
        body = {"status": "ok", "windows_lag": {"batches": batches, "rows": rows},
                "staged_rows": self._store.staged_rows(), "overloaded_exports": _health.overloaded_totals()}
        limiter = self._ingest.limiter
        if limiter is not None:
            body["memory"] = {"limit_bytes": limiter.config.limit, "soft_limit_bytes": limiter.config.soft_limit,
                              "anonymous_bytes": limiter.usage, "in_flight_bytes": self._ingest.budget.used,
                              "refusing_exports": limiter.limited}
        return web.json_response(body)

    async def traces(self, request: web.Request) -> web.Response:
        media_type = (request.content_type or "").lower()
        reply_type = _reply_type(request)
        if request.method != "POST":
            message = f"method {request.method} is not allowed on {TRACES_PATH}; use POST"
            return _status_response(reply_type, IngestError(405, code_pb2.UNIMPLEMENTED, message), {"Allow": "POST"})
        if media_type not in _otlp.MEDIA_TYPES:
            message = f"unsupported media type {media_type or '(none)'!r}; send {_otlp.PROTOBUF} or {_otlp.JSON}"
            return _status_response(reply_type, IngestError(415, code_pb2.INVALID_ARGUMENT, message))
        with self._ingest.reservation() as reservation:
            try:
                self._ingest.admit()
                body = await read_body(request, self._max_body_bytes, reservation)
                outcome = await self._ingest.export(body, media_type, reservation)
            except IngestError as err:
                return _status_response(reply_type, err)
        return web.Response(
            status=200,
            body=_otlp.encode_response(media_type, outcome.rejected, outcome.message),
            content_type=media_type,
        )

    async def sql(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.json_response({"error": f"use POST with {{\"sql\": ...}} on {SQL_PATH}"}, status=405)
        try:
            payload = await request.json()
            sql = payload["sql"]
            if not isinstance(sql, str):
                raise TypeError
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"the SQL request is larger than {_SQL_BODY_LIMIT} bytes"}, status=413)
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be a JSON object {"sql": "<query>"}'}, status=400)
        run = functools.partial(
            self._store.query, sql, max_rows=self._sql_max_rows, timeout_s=self._sql_timeout_s
        )
        async with self._sql_slots:
            try:
                result = await asyncio.get_running_loop().run_in_executor(None, run)
            except QueryRefused as exc:
                return web.json_response({"error": f"query refused: {exc}"}, status=400)
            except QueryTimeout as exc:
                return web.json_response({"error": f"{exc}; narrow it or raise --sql-timeout"}, status=400)
            except Exception as exc:  # a DuckDB error in the user's SQL
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                return web.json_response({"error": text}, status=400)
        body = {
            "columns": result.columns, "types": result.types, "rows": result.rows,
            "truncated": result.truncated, "row_limit": self._sql_max_rows,
        }
        if result.windows_behind:
            body["windows_behind"] = True
        return web.Response(body=json.dumps(body, default=json_default), content_type="application/json")


    async def windows(self, request: web.Request) -> web.Response:
        """POST {"windows": [...]}: validate every window, then insert-or-replace them all (or none)."""
        if request.method != "POST":
            return web.json_response({"error": f'use POST with {{"windows": [...]}} on {WINDOWS_PATH}'}, status=405)
        try:
            payload = json.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": "the windows request is too large; send fewer windows at once"}, status=413)
        except ValueError:
            return web.json_response({"error": 'body must be JSON: {"windows": [...]}'}, status=400)
        try:
            windows = windows_from_json(payload)
        except WindowRejected as exc:
            return web.json_response({"error": str(exc)}, status=400)
        try:
            written = await asyncio.get_running_loop().run_in_executor(None, self._store.write_windows, windows)
        except Exception:
            incident = uuid.uuid4().hex[:12]
            log.exception("writing windows failed (incident %s)", incident)
            return web.json_response({"error": f"writing windows failed (incident {incident})"}, status=500)
        return web.json_response({"written": written})
