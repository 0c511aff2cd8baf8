"""The one HTTP client of the commands that go through a running collector (httpx): the bearer token,
the CA file of an https collector, one-line errors, and waiting as an overloaded collector's
Retry-After asks.

Every failure is a `QueryError`: `CollectorUnreachable` (no answer) or `CollectorRefused` (an HTTP
error status, with the collector's message)."""

from __future__ import annotations

import io
import json
import logging
import os
import ssl
import time
from contextlib import contextmanager
from typing import Iterator

import httpx

from meritlens.collector._settings import ENV_TLS_CA, SettingsError, resolve_token
from meritlens.collector.receive._auth import authorization_header

logging.getLogger("httpx").setLevel(logging.WARNING)  # a line for every request would drown the commands' output
_READ_BYTES = 1024 * 1024

RETRY_STATUSES = (429, 503)
"""What an overloaded collector answers; its Retry-After says when to send again."""
MAX_RETRY_WAIT_S = 10.0


class QueryError(RuntimeError):
    """The data could not be read or written where the command points; the message says why."""


class CollectorUnreachable(QueryError):
    """No collector answered at the URL."""


class CollectorRefused(QueryError):
    """The collector answered with an HTTP error: ``status``, the body, and its JSON ``payload``
    (``{}`` if none); the message is the collector's own (its ``error``), else the status."""

    def __init__(self, message: str, status: int, body: bytes, payload: dict):
        super().__init__(message)
        self.status = status
        self.body = body
        self.payload = payload


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


def retry_after_s(raw: str | None) -> float:
    """The wait a Retry-After header asks for (seconds), kept within 0.1-10 s; 1 s when it says none."""
    try:
        return min(MAX_RETRY_WAIT_S, max(0.1, float(raw)))
    except (TypeError, ValueError):
        return 1.0


def _refused(response: httpx.Response) -> CollectorRefused:
    body = response.read()
    try:
        payload = json.loads(body)
    except ValueError:
        payload = {}
    payload = payload if isinstance(payload, dict) else {}
    message = str(payload.get("error") or f"HTTP {response.status_code} {response.reason_phrase}")
    return CollectorRefused(" ".join(message.split()), response.status_code, body, payload)


class CollectorClient:
    """Requests to the collector at ``url``, sent the bearer token (default: $MERITLENS_TOKEN or the
    file $MERITLENS_TOKEN_FILE) and, over https, verified against ``ca_file`` (`client_ssl_context`)."""

    def __init__(self, url: str, *, token: str | None = None, ca_file: str | None = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        if token is None:
            try:
                token = resolve_token()
            except SettingsError as exc:
                raise QueryError(str(exc)) from None
        self._client = httpx.Client(base_url=self.url, headers=authorization_header(token), timeout=timeout,
                                    verify=client_ssl_context(self.url, ca_file) or True)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "CollectorClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _answer(self, method: str, path: str, *, retry_for_s: float = 0.0, **request) -> Iterator[httpx.Response]:
        """The streamed response to one request; an error status raises CollectorRefused. With
        ``retry_for_s``, a 429 or 503 is sent again after its Retry-After, for up to that long."""
        deadline = time.monotonic() + retry_for_s
        while True:
            try:
                with self._client.stream(method, path, **request) as response:
                    if response.is_success:
                        yield response
                        return
                    wait = retry_after_s(response.headers.get("Retry-After"))
                    if response.status_code not in RETRY_STATUSES or time.monotonic() + wait > deadline:
                        raise _refused(response)
            except httpx.HTTPError as exc:
                raise CollectorUnreachable(f"no collector reachable at {self.url} ({_reason(exc)})") from None
            time.sleep(wait)

    def post(self, path: str, body: bytes, content_type: str, *, headers: dict | None = None,
             retry_for_s: float = 0.0) -> bytes:
        """POST ``body`` to ``path``; the reply's body."""
        with self._answer("POST", path, content=body, headers={"Content-Type": content_type, **(headers or {})},
                          retry_for_s=retry_for_s) as response:
            return response.read()

    def post_json(self, path: str, payload: dict) -> dict:
        """POST ``payload`` as JSON to ``path``; the JSON reply."""
        reply = self.post(path, json.dumps(payload).encode(), "application/json")
        try:
            return json.loads(reply)
        except ValueError:
            raise QueryError(f"the collector at {self.url} answered {path} with no JSON") from None

    def get_json(self, path: str) -> dict:
        """GET ``path``: its JSON reply."""
        with self.get_stream(path) as (_, body):
            try:
                return json.loads(body.read())
            except ValueError:
                raise QueryError(f"the collector at {self.url} answered {path} with no JSON") from None

    @contextmanager
    def get_stream(self, path: str, params: dict | None = None) -> Iterator[tuple[httpx.Headers, io.BufferedReader]]:
        """GET ``path``: the reply's headers and its body as a file read as it arrives."""
        with self._answer("GET", path, params=params) as response:
            yield response.headers, io.BufferedReader(_ResponseFile(response), _READ_BYTES)

    def probe(self, path: str) -> str | None:
        """None when a collector answers GET ``path`` (whatever its status: a 401 is reported by the
        command itself, with the token advice); else why not (one line)."""
        try:
            self._client.get(path)
        except httpx.HTTPError as exc:
            return _reason(exc)
        return None


class _ResponseFile(io.RawIOBase):
    """A streamed response body as a readable file (what Arrow's stream reader takes)."""

    def __init__(self, response: httpx.Response):
        self._chunks = response.iter_bytes()
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
            except httpx.HTTPError as exc:
                raise OSError(f"the collector's answer broke off ({_reason(exc)})") from None
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def _reason(exc: httpx.HTTPError) -> str:
    cause = exc.__context__ or exc.__cause__
    text = str(exc) or str(cause or "") or type(exc).__name__
    return " ".join(text.split())
