"""The dashboard: a read-only page at `/` and the JSON and Arrow endpoints it and the CLI read.

Routes (all GET, all read-only):

- ``/``, ``/static/<file>``: the page (hand-written HTML, CSS and JavaScript shipped in the
  package; no build step, nothing fetched from elsewhere). ``/?view=overview|target|traces|trace|evidence``
  picks the page; its data is inlined for the first paint when the request may read it;
- ``/api/dashboard/overview``, ``timeseries``, ``models``, ``traces``, ``trace``, ``evidence``, ``regressions``: see
  collector/serve/_dashboard_api.py;
- ``/api/dashboard/targets``: every target with application spans, its span and task counts and scopes;
- ``/api/dashboard/windows?target=&scope=``: stored windows with the catalogue facts of their metric;
- ``/api/dashboard/tasks?target=&scope=&limit=``: per-task latency and cost of one target (the samples
  behind the latency and cost windows);
- ``/api/dashboard/profiles?target=``: the target's readiness against the profiles `serve --profile` loaded,
  and the latest readiness check recorded for it (`meritlens readiness`);
- ``/api/arrow?table=spans|windows``: a whole table as an Arrow IPC stream (`meritlens export`
  reads it when the collector holds the DuckDB file).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from importlib import resources

import pyarrow as pa
from aiohttp import web

from meritlens.analytics.engine import (
    APPLICATION_SPANS,
    CATALOGUE,
    COVERAGE_VIEW,
    METRICS,
    SCOPE_ALL,
    SPANS_TABLE,
    TASK_KEY,
    TASK_SAMPLE_METRICS,
    WINDOW_COLUMN_NAMES,
    WINDOWS_TABLE,
    sql_string,
    task_samples_sql,
)
from meritlens.collector._paths import (
    API_ARROW_PATH,
    API_PROFILES_PATH,
    API_TARGETS_PATH,
    API_TASKS_PATH,
    API_WINDOWS_PATH,
    ARROW_ROW_COUNT_HEADER,
    ARROW_STREAM_MEDIA_TYPE,
    DASHBOARD_PATH,
    STATIC_PATH_PREFIX,
)
from meritlens.collector.serve._dashboard_api import Explorer
from meritlens.collector.store._results import json_default
from meritlens.collector.store._sink import SpanQueries

log = logging.getLogger("meritlens.collector.dashboard")

EXPORT_TABLES: dict[str, str] = {
    SPANS_TABLE: f"SELECT * FROM {SPANS_TABLE} ORDER BY end_unix_nano, trace_id, span_id",
    WINDOWS_TABLE: f"SELECT * FROM {WINDOWS_TABLE} ORDER BY target_id, metric, scope",
}
"""The tables `/api/arrow` and `meritlens export` write, with the query (and row order) of each."""

DEFAULT_TASK_LIMIT = 2000
MAX_TASK_LIMIT = 20000

_WINDOW_SELECT = ", ".join(f'"{name}"' for name in WINDOW_COLUMN_NAMES)
_CATALOGUE_ORDER = {spec.id: index for index, spec in enumerate(CATALOGUE)}
_SCRIPTS = ("core.js", "charts.js", "windows.js", "regressions.js", "overview.js", "target.js", "traces.js",
            "alerts.js", "app.js")
"""The page's scripts, in the order index.html loads them."""
_STATIC_FILES = {**{name: "text/javascript" for name in _SCRIPTS}, "dashboard.css": "text/css"}
_INITIAL_VIEWS = {"overview", "target", "traces", "trace", "evidence"}
_INITIAL_MARK = b"<!--initial-data-->"
_SECURITY_HEADERS = {
    # The page loads only its own script and style and talks only to this collector.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

ReadinessProvider = Callable[[str], dict]
"""Given a target id, its readiness against the loaded profiles: ``{"target_id", "profiles_loaded",
"reports": [CoverageReport as JSON plus "profile"]}``; ``.targets`` lists the targets they name."""

_TARGETS_SQL = f"""
SELECT target_id,
  count(*) AS spans,
  count(DISTINCT {TASK_KEY}) AS tasks,
  min(end_time) AS first_span_time,
  max(end_time) AS last_span_time,
  coalesce(list(DISTINCT assessment_id ORDER BY assessment_id) FILTER (WHERE assessment_id IS NOT NULL), [])
    AS assessments
FROM {SPANS_TABLE}
WHERE {APPLICATION_SPANS}
GROUP BY target_id ORDER BY target_id
"""


def _metric_info(spec) -> dict:
    return {"group": spec.group.value, "description": spec.description, "direction": spec.direction.value,
            "ratio": spec.ratio, "order": _CATALOGUE_ORDER[spec.id]}


def _static_text(name: str) -> bytes:
    return (resources.files("meritlens.collector.serve") / "static" / name).read_bytes()


def _json(body, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(body, default=json_default), content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


class Dashboard:
    """The page and its endpoints over one store (`SpanQueries`); `install(app)` adds the routes."""

    def __init__(self, store: SpanQueries, *, readiness: ReadinessProvider | None = None, token=None,
                 regressions: Callable[[], dict] | None = None, redactor=None):
        self._store = store
        self._readiness = readiness
        self._token = token  # the collector's BearerToken: data is inlined only for a request it accepts
        self._explorer = Explorer(store, readiness, regressions, redactor)
        self._index = _static_text("index.html")
        self._static = {name: _static_text(name) for name in _STATIC_FILES}

    def install(self, app: web.Application) -> None:
        app.router.add_get(DASHBOARD_PATH, self.index)
        app.router.add_get(STATIC_PATH_PREFIX + "{name}", self.static)
        app.router.add_get(API_TARGETS_PATH, self.targets)
        app.router.add_get(API_WINDOWS_PATH, self.windows)
        app.router.add_get(API_TASKS_PATH, self.tasks)
        app.router.add_get(API_PROFILES_PATH, self.profiles)
        app.router.add_get(API_ARROW_PATH, self.arrow)
        self._explorer.install(app)

    async def _query(self, sql: str) -> list[dict]:
        result = await asyncio.get_running_loop().run_in_executor(None, self._store.query, sql)
        return [dict(zip(result.columns, row, strict=True)) for row in result.rows]

    # --- the page ------------------------------------------------------------------------------
    async def index(self, request: web.Request) -> web.Response:
        return web.Response(body=self._index.replace(_INITIAL_MARK, await self._initial_data(request)),
                            content_type="text/html", charset="utf-8", headers=_SECURITY_HEADERS)

    async def _initial_data(self, request: web.Request) -> bytes:
        """The requested view's data as an inert JSON script element, so the first paint holds it.
        Nothing is inlined when the collector wants a token the request did not carry (the page
        then fetches with the token from its URL fragment)."""
        if self._token is not None and not self._token.accepts(request.headers.get("Authorization")):
            return b""
        view = request.query.get("view", "overview")
        if view not in _INITIAL_VIEWS:
            return b""
        query = dict(request.query)
        if view == "target":
            query.setdefault("range", "all")
        try:
            document = await self._explorer.document("timeseries" if view == "target" else view, query)
        except ValueError:
            return b""  # a bad parameter: the page's own request reports it
        text = json.dumps({"view": view, "query": query, "document": document}, default=json_default)
        # inside <script> only "</" could end the element; escaping <, > and & keeps the JSON identical
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        return b'<script type="application/json" id="initial-data">' + text.encode() + b"</script>"

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self._static:
            raise web.HTTPNotFound(text=f"no static file {name!r}")
        return web.Response(body=self._static[name], content_type=_STATIC_FILES[name], charset="utf-8",
                            headers=_SECURITY_HEADERS)

    # --- JSON endpoints ------------------------------------------------------------------------
    async def targets(self, request: web.Request) -> web.Response:
        rows = await self._query(_TARGETS_SQL)
        for row in rows:
            row["scopes"] = [SCOPE_ALL, *row.pop("assessments")]
        # A profile's target with no spans yet is shown too: nothing it requires is covered.
        seen = {row["target_id"] for row in rows}
        for target in getattr(self._readiness, "targets", []):
            if target not in seen:
                rows.append({"target_id": target, "spans": 0, "tasks": 0, "first_span_time": None,
                             "last_span_time": None, "scopes": [SCOPE_ALL]})
        return _json({"db": self._store.db_name, "readiness_profiles": self._readiness is not None,
                      "targets": rows})

    async def windows(self, request: web.Request) -> web.Response:
        where = [f"{column} = {sql_string(request.query[name])}"
                 for name, column in (("target", "target_id"), ("scope", "scope")) if name in request.query]
        sql = f"SELECT {_WINDOW_SELECT} FROM {WINDOWS_TABLE}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY target_id, scope, metric"
        rows = await self._query(sql)
        for row in rows:
            spec = METRICS.get(row["metric"])
            row["metric_info"] = None if spec is None else _metric_info(spec)
        body = {"windows": rows}
        if "target" in request.query:
            # Catalogue metrics with no stored window for this target: nothing feeds them yet.
            stored = {row["metric"] for row in rows}
            body["not_stored"] = [
                {"metric": spec.id, "unit": spec.unit, "aggregation": spec.default_aggregation.value,
                 "metric_info": _metric_info(spec)}
                for spec in CATALOGUE if spec.id not in stored
            ]
        return _json(body)

    async def tasks(self, request: web.Request) -> web.Response:
        target = request.query.get("target")
        if not target:
            return _error(400, "give the target: /api/dashboard/tasks?target=<target id>")
        scope = request.query.get("scope", SCOPE_ALL)
        raw_limit = request.query.get("limit", str(DEFAULT_TASK_LIMIT))
        try:
            limit = int(raw_limit)
            if not 1 <= limit <= MAX_TASK_LIMIT:
                raise ValueError
        except ValueError:
            return _error(400, f"limit must be an integer from 1 to {MAX_TASK_LIMIT}, got {raw_limit!r}")
        rows = await self._query(task_samples_sql(target, scope, limit))
        total = rows[0]["total_tasks"] if rows else 0
        for row in rows:
            del row["total_tasks"]
        return _json({"target_id": target, "scope": scope, "metrics": list(TASK_SAMPLE_METRICS),
                      "total_tasks": total, "truncated": total > len(rows), "tasks": rows})

    async def profiles(self, request: web.Request) -> web.Response:
        target = request.query.get("target")
        if not target:
            return _error(400, "give the target: /api/dashboard/profiles?target=<target id>")
        if self._readiness is None:
            document = {"target_id": target, "profiles_loaded": 0, "reports": []}
        else:
            document = await asyncio.get_running_loop().run_in_executor(None, self._readiness, target)
        recorded = await self._query(
            f"SELECT scope, checked_at, required, covered, missing, ready, baseline_ready, shortfalls "
            f"FROM {COVERAGE_VIEW} WHERE target_id = {sql_string(target)} ORDER BY scope")
        document["recorded"] = recorded
        return _json(document)

    # --- Arrow ---------------------------------------------------------------------------------
    async def arrow(self, request: web.Request) -> web.StreamResponse:
        table = request.query.get("table")
        if table not in EXPORT_TABLES:
            return _error(400, f"table must be one of {', '.join(EXPORT_TABLES)}, got {table!r}")
        loop = asyncio.get_running_loop()
        rows = (await self._query(f"SELECT count(*) AS n FROM {table}"))[0]["n"]
        query = await loop.run_in_executor(None, self._store.query_arrow, EXPORT_TABLES[table])
        try:
            response = web.StreamResponse(headers={
                "Content-Type": ARROW_STREAM_MEDIA_TYPE, "Cache-Control": "no-store",
                # Rows when the stream started; a collector still receiving may send a few more.
                ARROW_ROW_COUNT_HEADER: str(rows),
            })
            await response.prepare(request)
            stream = _IpcChunks(query.reader)
            while True:
                chunk = await loop.run_in_executor(None, stream.next_chunk)
                if chunk is None:
                    break
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            query.close()


class _IpcChunks:
    """Encodes a RecordBatchReader as an Arrow IPC stream, one chunk of bytes per batch."""

    def __init__(self, reader: pa.RecordBatchReader):
        self._reader = reader
        self._parts: list[bytes] = []
        self._writer = pa.ipc.new_stream(self, reader.schema)
        self._done = False

    # file-like sink for the IPC writer
    closed = False

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def _take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out

    def next_chunk(self) -> bytes | None:
        """The next encoded piece of the stream, or None after the end-of-stream marker."""
        if self._done:
            return None
        try:
            batch = self._reader.read_next_batch()
        except StopIteration:
            self._writer.close()
            self._done = True
            return self._take()
        self._writer.write_batch(batch)
        return self._take()
