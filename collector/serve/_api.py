"""The collector's JSON API beside the OTLP route: GET /healthz, POST /api/sql (read-only SQL),
POST /api/windows, POST /api/readiness and POST /api/experiments.

The readiness and experiments handlers need pydantic and the analytics models, which a collector that
only receives spans never loads: their modules are imported when the route is first asked for, off
the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web

from meritlens.analytics.engine import WindowRejected, windows_from_json
from meritlens.collector._paths import EXPERIMENTS_PATH, HEALTH_PATH, READINESS_PATH, SQL_PATH, WINDOWS_PATH
from meritlens.collector.receive._http import CLIENT_MAX_SIZE
from meritlens.collector.receive._ingest import Ingest
from meritlens.collector.serve._health import Health
from meritlens.collector.store._results import json_default
from meritlens.collector.store._sink import CollectorStore
from meritlens.collector.store._sqlguard import QueryRefused, QueryTimeout

log = logging.getLogger("meritlens.collector.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _readiness_handler(store: CollectorStore) -> Handler:
    from meritlens.collector.serve._evidence import readiness_handler

    return readiness_handler(store)


def _experiments_handler(store: CollectorStore) -> Handler:
    from meritlens.collector.serve._experiments_api import experiments_handler

    return experiments_handler(store)


class ApiRoutes:
    """The routes over one store; `install` adds them to the application of the HTTP receiver."""

    def __init__(self, store: CollectorStore, ingest: Ingest, health: Health, *, sql_max_rows: int,
                 sql_timeout_s: float, sql_concurrency: int = 4,
                 window_lag: Callable[[], tuple[int, int]] = lambda: (0, 0)):
        self._store = store
        self._ingest = ingest
        self._health = health
        self._window_lag = window_lag
        """(batches, rows) committed that the windows do not include yet."""
        self._sql_max_rows = sql_max_rows
        self._sql_timeout_s = sql_timeout_s
        self._sql_slots = asyncio.Semaphore(sql_concurrency)

    def install(self, app: web.Application) -> None:
        app.router.add_route("*", SQL_PATH, self.sql)
        app.router.add_get(HEALTH_PATH, self.health)
        app.router.add_route("*", READINESS_PATH, self._on_first_request(_readiness_handler))
        app.router.add_route("*", WINDOWS_PATH, self.windows)
        app.router.add_route("*", EXPERIMENTS_PATH, self._on_first_request(_experiments_handler))

    def _on_first_request(self, factory: Callable[[CollectorStore], Handler]) -> Handler:
        """The handler ``factory(store)`` makes, made when the route is first asked for (off the event loop)."""
        handler = None

        async def route(request: web.Request) -> web.StreamResponse:
            nonlocal handler
            if handler is None:
                handler = await asyncio.get_running_loop().run_in_executor(None, factory, self._store)
            return await handler(request)

        return route

    async def health(self, request: web.Request) -> web.Response:
        batches, rows = self._window_lag()
        body = {"status": "ok", "windows_lag": {"batches": batches, "rows": rows},
                "staged_rows": self._store.staged_rows(), "overloaded_exports": self._health.overloaded_totals()}
        limiter = self._ingest.limiter
        if limiter is not None:
            body["memory"] = {"limit_bytes": limiter.config.limit, "soft_limit_bytes": limiter.config.soft_limit,
                              "anonymous_bytes": limiter.usage, "in_flight_bytes": self._ingest.budget.used,
                              "refusing_exports": limiter.limited}
        return web.json_response(body)

    async def sql(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.json_response({"error": f"use POST with {{\"sql\": ...}} on {SQL_PATH}"}, status=405)
        try:
            payload = await request.json()
            sql = payload["sql"]
            if not isinstance(sql, str):
                raise TypeError
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"the SQL request is larger than {CLIENT_MAX_SIZE} bytes"}, status=413)
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be a JSON object {"sql": "<query>"}'}, status=400)
        wait_s = payload.get("wait_s")
        if wait_s is not None and (isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or wait_s < 0):
            return web.json_response({"error": f'"wait_s" must be a number of seconds >= 0, got {wait_s!r}'},
                                     status=400)
        run = functools.partial(self._store.query, sql, max_rows=self._sql_max_rows, timeout_s=self._sql_timeout_s,
                                wait_s=wait_s)
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
            return web.json_response({"error": "the windows request is too large; send fewer windows at once"},
                                     status=413)
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
