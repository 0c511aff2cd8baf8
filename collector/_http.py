"""The OTLP/HTTP receiver and the read-only SQL endpoint (aiohttp)."""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import decimal
import json
import logging
import uuid
import zlib

from aiohttp import web

from meritlens.collector import _otlp
from meritlens.collector._evidence import add_readiness_route
from meritlens.collector._experiment_io import add_experiment_routes
from meritlens.collector._normalize import NormalizeOptions, normalize
from meritlens.collector._pipeline import IngestPipeline, Overloaded
from meritlens.collector._settings import HEALTH_PATH, SQL_PATH, TRACES_PATH
from meritlens.collector._sqlguard import QueryRefused
from meritlens.collector._store import SpanStore

log = logging.getLogger("meritlens.collector.http")

_CHUNK = 64 * 1024
RETRY_AFTER_SECONDS = 1


class _TooLarge(Exception):
    pass


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


async def _read_body(request: web.Request, limit: int) -> bytes:
    """Read the body, decompressing as it streams, so that at most ``limit`` bytes are ever held."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in ("gzip", "x-gzip"):
        inflater = zlib.decompressobj(wbits=31)
    elif encoding == "deflate":
        inflater = zlib.decompressobj()
    else:
        raise _HttpError(415, f"unsupported Content-Encoding {encoding!r}; use gzip, deflate or identity")
    out = bytearray()
    async for chunk in request.content.iter_chunked(_CHUNK):
        if inflater is None:
            out += chunk
        else:
            try:
                out += inflater.decompress(chunk, limit + 1 - len(out))
                while inflater.unconsumed_tail and len(out) <= limit:
                    out += inflater.decompress(inflater.unconsumed_tail, limit + 1 - len(out))
            except zlib.error as exc:
                raise _HttpError(400, f"body is not valid {encoding} data: {exc}") from None
        if len(out) > limit:
            raise _TooLarge()
    if inflater is not None:
        try:
            out += inflater.flush()
        except zlib.error as exc:
            raise _HttpError(400, f"body is not valid {encoding} data: {exc}") from None
        if len(out) > limit:
            raise _TooLarge()
        if not inflater.eof and out:
            raise _HttpError(400, f"{encoding} body is truncated")
    return bytes(out)


def _status_response(media_type: str, status: int, message: str, headers: dict | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=_otlp.encode_status(media_type, status, message),
        content_type=media_type,
        headers=headers,
    )


class HttpReceiver:
    """Routes: POST /v1/traces (OTLP), POST /api/sql (read-only SQL), POST /api/readiness,
    POST /api/experiments, GET /healthz."""

    def __init__(self, store: SpanStore, pipeline: IngestPipeline, *, max_body_bytes: int,
                 normalize_options: NormalizeOptions = NormalizeOptions()):
        self._normalize_options = normalize_options
        self._store = store
        self._pipeline = pipeline
        self._max_body_bytes = max_body_bytes

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", TRACES_PATH, self.traces)
        app.router.add_route("*", SQL_PATH, self.sql)
        app.router.add_get(HEALTH_PATH, self.health)
        add_readiness_route(app, self._store)
        add_experiment_routes(app, self._store)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def traces(self, request: web.Request) -> web.Response:
        media_type = (request.content_type or "").lower()
        reply_type = media_type if media_type in _otlp.MEDIA_TYPES else _otlp.JSON
        if request.method != "POST":
            return _status_response(
                reply_type, 405, f"method {request.method} is not allowed on {TRACES_PATH}; use POST",
                {"Allow": "POST"},
            )
        if media_type not in _otlp.MEDIA_TYPES:
            return _status_response(
                reply_type, 415,
                f"unsupported media type {media_type or '(none)'!r}; send {_otlp.PROTOBUF} or {_otlp.JSON}",
            )
        try:
            body = await _read_body(request, self._max_body_bytes)
        except _TooLarge:
            return _status_response(
                reply_type, 413, f"request body exceeds {self._max_body_bytes} bytes after decompression"
            )
        except _HttpError as err:
            return _status_response(reply_type, err.status, err.message)
        try:
            decoded = _otlp.decode(body, media_type)
        except _otlp.BadRequest as exc:
            return _status_response(reply_type, 400, str(exc))
        batch = normalize(decoded.request, decoded.refusals, self._normalize_options)
        if batch.size:
            try:
                await self._pipeline.submit(batch.to_arrow())
            except Overloaded as exc:
                return _status_response(
                    reply_type, 503, f"{exc}; retry after {RETRY_AFTER_SECONDS}s",
                    {"Retry-After": str(RETRY_AFTER_SECONDS)},
                )
            except Exception:
                incident = uuid.uuid4().hex[:12]
                log.exception("storing spans failed (incident %s)", incident)
                return _status_response(reply_type, 500, f"storing spans failed (incident {incident})")
        message = "; ".join(batch.refused[:20])
        if len(batch.refused) > 20:
            message += f"; and {len(batch.refused) - 20} more"
        return web.Response(
            status=200,
            body=_otlp.encode_response(media_type, len(batch.refused), message),
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
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be a JSON object {"sql": "<query>"}'}, status=400)
        try:
            result = await asyncio.get_running_loop().run_in_executor(None, self._store.query, sql)
        except QueryRefused as exc:
            return web.json_response({"error": f"query refused: {exc}"}, status=400)
        except Exception as exc:  # a DuckDB error in the user's SQL
            return web.json_response({"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}, status=400)
        body = {"columns": result.columns, "types": result.types, "rows": result.rows}
        return web.Response(body=json.dumps(body, default=json_default), content_type="application/json")


def json_default(value):
    """JSON encoding of the values DuckDB returns."""
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)
