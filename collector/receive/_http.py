"""The OTLP/HTTP receiver (aiohttp), with the token and drain middlewares of the collector's HTTP server."""

from __future__ import annotations

import asyncio
import json
import logging
import zlib

import aiohttp
from aiohttp import web
from google.rpc import code_pb2

from meritlens.collector._paths import DASHBOARD_PATH, STATIC_PATH_PREFIX, TRACES_PATH
from meritlens.collector.process import _otlp
from meritlens.collector.receive._auth import AUTHORIZATION, BearerToken
from meritlens.collector.receive._ingest import Ingest, IngestError, Reservation, bad_request, overloaded, too_large
from meritlens.collector.receive._refusals import RefusalLog

log = logging.getLogger("meritlens.collector.http")

_CHUNK = 64 * 1024
CLIENT_MAX_SIZE = 1024 * 1024
"""The largest body aiohttp reads whole for a route (the OTLP route streams its own, up to --max-body-bytes)."""


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
        except Exception:  # only for the log line
            return response.reason or ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        return str(parsed.get("error") or parsed.get("message") or parsed)
    return str(parsed)


class HttpReceiver:
    """POST /v1/traces (OTLP), and what every route of the collector's HTTP server goes through: the
    bearer token and the drain at shutdown.

    With a token configured, every route needs `Authorization: Bearer <token>`, except GET of the
    dashboard page and its static files (they hold no data; the page sends the token on its calls).
    """

    def __init__(self, ingest: Ingest, *, max_body_bytes: int, token: BearerToken):
        self._ingest = ingest
        self._max_body_bytes = max_body_bytes
        self._token = token
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._draining = False
        self.refusals = RefusalLog(withheld=(400,) if ingest.redacting else ())

    def app(self) -> web.Application:
        """An application with the OTLP route and the token and drain middlewares, which apply to
        every route installed in it later (collector/serve/ installs the others)."""
        app = web.Application(middlewares=[self._track, self._auth], client_max_size=CLIENT_MAX_SIZE)
        app.router.add_route("*", TRACES_PATH, self.traces)
        return app

    async def drain(self, timeout: float) -> bool:
        """Refuse new requests (503, Connection: close) and wait up to ``timeout`` seconds for the
        requests in progress to be answered; True when none is left.

        aiohttp's own shutdown drops body bytes that arrive after it starts, so a request still
        uploading would be lost; this lets it finish first."""
        self._draining = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            log.warning("%d requests still in progress after %gs; closing them", self._active, timeout)
            return False
        return True

    @web.middleware
    async def _track(self, request: web.Request, handler):
        if self._draining:
            err = overloaded("the collector is shutting down", "shutting_down")
            if request.path == TRACES_PATH:
                response = _status_response(_reply_type(request), self._ingest.refused(err))
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
                return _status_response(reply_type, self._ingest.refused(err))
        return web.Response(
            status=200,
            body=_otlp.encode_response(media_type, outcome.rejected, outcome.message),
            content_type=media_type,
        )
