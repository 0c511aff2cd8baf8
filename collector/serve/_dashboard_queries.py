"""The SQL behind the dashboard's pages: the overview across targets, a target over time and by
model, the trace list and one trace. Every figure is computed by DuckDB from `spans` (through the
`tasks` view) or read from `windows`; the browser only draws it.

A sum over rows that did not all report a value is NULL when none did (never 0), and each
series carries the count of rows it covers so the page can say what is missing.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from meritlens.analytics.engine import (
    APPLICATION_SPANS,
    ERROR_SPAN,
    SCOPE_ALL,
    SPANS_TABLE,
    TASKS_VIEW,
    TASK_KEY,
    WINDOWS_TABLE,
    flagged_spans_sql,
    sql_string,
)

RANGES: dict[str, _dt.timedelta | None] = {
    "hour": _dt.timedelta(hours=1),
    "day": _dt.timedelta(days=1),
    "week": _dt.timedelta(days=7),
    "all": None,
}
"""The named time ranges, ending now; ``custom`` takes ``from`` and ``to``."""

BUCKETS: dict[str, int] = {
    "1s": 1, "10s": 10, "1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "1d": 86400, "1w": 604800,
}
"""Bucket widths a person may choose, in seconds; ``auto`` picks the first giving at most MAX_BUCKETS."""
MAX_BUCKETS = 60
MAX_TRACES = 500


class BadParameter(ValueError):
    """A query parameter the page or a script got wrong; the message names it."""


@dataclass(frozen=True)
class TimeRange:
    """A closed span of end times; a None end is open."""

    name: str
    start: _dt.datetime | None
    end: _dt.datetime | None

    def condition(self, column: str) -> str:
        parts = []
        if self.start is not None:
            parts.append(f"{column} >= {_timestamp(self.start)}")
        if self.end is not None:
            parts.append(f"{column} <= {_timestamp(self.end)}")
        return " AND ".join(parts) or "true"

    def to_json(self) -> dict:
        return {"name": self.name, "from": _iso(self.start), "to": _iso(self.end)}


def _iso(value: _dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _timestamp(value: _dt.datetime) -> str:
    return f"TIMESTAMPTZ {sql_string(value.isoformat())}"


def _parse_time(raw: str, name: str) -> _dt.datetime:
    try:
        value = _dt.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadParameter(f"{name} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got {raw!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)


def time_range(query, now: _dt.datetime | None = None) -> TimeRange:
    """The range a request asks for: ``range=hour|day|week|all`` (default all), or ``range=custom``
    with ``from`` and/or ``to`` (ISO 8601)."""
    name = query.get("range", "all")
    if name == "custom":
        start = _parse_time(query["from"], "from") if query.get("from") else None
        end = _parse_time(query["to"], "to") if query.get("to") else None
        if start and end and start > end:
            raise BadParameter("from must not be later than to")
        return TimeRange(name, start, end)
    if name not in RANGES:
        raise BadParameter(f"range must be one of {', '.join([*RANGES, 'custom'])}, got {name!r}")
    width = RANGES[name]
    if width is None:
        return TimeRange(name, None, None)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return TimeRange(name, now - width, now)


def bucket_seconds(choice: str, first: _dt.datetime | None, last: _dt.datetime | None) -> int:
    """The bucket width: the chosen one, or (``auto``) the narrowest giving at most MAX_BUCKETS
    over [first, last]."""
    if choice != "auto":
        if choice not in BUCKETS:
            raise BadParameter(f"bucket must be auto or one of {', '.join(BUCKETS)}, got {choice!r}")
        return BUCKETS[choice]
    if first is None or last is None:
        return BUCKETS["1h"]
    seconds = max(1.0, (last - first).total_seconds())
    for width in BUCKETS.values():
        if seconds / width <= MAX_BUCKETS:
            return width
    return BUCKETS["1w"]


def _target_filter(target: str) -> str:
    return f"target_id = {sql_string(target)}"


# --- overview ---------------------------------------------------------------------------------------
def overview_sql() -> str:
    """One row per target with application spans: counts and last span time from `spans`, the
    figures from the target's scope-`all` windows (NULL when the window holds no value)."""
    def window(metric: str, column: str, name: str) -> str:
        return (f"max({column}) FILTER (WHERE metric = {sql_string(metric)}) AS {name}")

    return f"""
WITH s AS (
  SELECT target_id, count(*) AS spans, count(DISTINCT {TASK_KEY}) AS tasks,
    max(end_time) AS last_seen
  FROM {SPANS_TABLE} WHERE {APPLICATION_SPANS} GROUP BY target_id
),
w AS (
  SELECT target_id,
    {window("total_task_cost", "value", "total_cost")},
    {window("total_task_cost", "state", "cost_state")},
    {window("total_task_cost", "sample_count", "priced_tasks")},
    {window("total_task_cost", "mean", "mean_cost")},
    {window("end_to_end_latency", "p50", "latency_p50")},
    {window("end_to_end_latency", "p95", "latency_p95")},
    {window("end_to_end_latency", "state", "latency_state")},
    {window("task_success", "value", "success_rate")},
    {window("task_success", "sample_count", "known_outcomes")},
    {window("task_success", "state", "success_state")}
  FROM {WINDOWS_TABLE} WHERE scope = '{SCOPE_ALL}' GROUP BY target_id
)
SELECT s.target_id, s.spans, s.tasks, s.last_seen, w.* EXCLUDE (target_id)
FROM s LEFT JOIN w USING (target_id) ORDER BY s.target_id"""


# --- a target over time -----------------------------------------------------------------------------
def task_extent_sql(target: str, span: TimeRange) -> str:
    return (f"SELECT min(end_time) AS first, max(end_time) AS last FROM {TASKS_VIEW} "
            f"WHERE {_target_filter(target)} AND {span.condition('end_time')}")


def timeseries_sql(target: str, span: TimeRange, seconds: int) -> str:
    """Per bucket of task end time: tasks; cost (a sum over the priced tasks, with their count);
    tokens; p50/p95 end-to-end latency; tasks with an error; retries (NULL when no call reported)."""
    return f"""
SELECT time_bucket(INTERVAL '{int(seconds)} seconds', end_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS bucket,
  count(*) AS tasks,
  sum(cost_usd) AS cost_usd, count(cost_usd) AS priced_tasks,
  sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
  count(input_tokens) AS tasks_with_tokens,
  quantile_cont(end_to_end_latency_s, 0.5) AS latency_p50,
  quantile_cont(end_to_end_latency_s, 0.95) AS latency_p95,
  count(*) FILTER (WHERE errors > 0) AS tasks_with_errors,
  count(*) FILTER (WHERE errors > 0) / count(*) AS error_rate,
  sum(retries) AS retries
FROM {TASKS_VIEW}
WHERE {_target_filter(target)} AND {span.condition('end_time')}
GROUP BY bucket ORDER BY bucket"""


_MODEL = "coalesce(response_model, request_model)"


def models_sql(target: str, span: TimeRange) -> str:
    """The target's LLM calls grouped by provider and model (the response's model, else the one
    requested); cost is a sum over the priced calls, NULL when none was priced. A call is what the
    windows count as one (`is_call`: a wrapper around a call is not one)."""
    return f"""
WITH {flagged_spans_sql(f" AND {_target_filter(target)}")}
SELECT provider, {_MODEL} AS model, count(*) AS calls,
  count(*) FILTER (WHERE is_error) AS errors,
  sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
  sum(cost_usd) AS cost_usd, count(cost_usd) AS priced_calls,
  quantile_cont(duration_s, 0.5) AS latency_p50, quantile_cont(duration_s, 0.95) AS latency_p95,
  sum(retries) AS retries
FROM flagged
WHERE is_call AND {span.condition('end_time')}
GROUP BY ALL ORDER BY cost_usd DESC NULLS LAST, calls DESC, model"""


# --- traces -----------------------------------------------------------------------------------------
def traces_sql(*, target: str | None, model: str | None, status: str | None, span: TimeRange,
               limit: int) -> str:
    """The most recent traces (by start) with their root span, size, models, cost and tokens;
    filtered by a target or model any span of the trace has, by status (``error``: some span
    failed; ``ok``: none did) and by the trace's start time."""
    having = [span.condition("min(start_time)")]
    if target:
        having.append(f"bool_or({_target_filter(target)})")
    if model:
        having.append(f"bool_or({_MODEL} = {sql_string(model)})")
    if status == "error":
        having.append(f"bool_or({ERROR_SPAN})")
    elif status == "ok":
        having.append(f"NOT bool_or({ERROR_SPAN})")
    elif status not in (None, ""):
        raise BadParameter(f"status must be ok or error, got {status!r}")
    return f"""
SELECT trace_id, min(start_time) AS start_time,
  (max(end_unix_nano) - min(start_unix_nano)) / 1e9 AS duration_s,
  count(*) AS spans,
  coalesce(arg_min(name, start_unix_nano) FILTER (WHERE parent_span_id IS NULL), arg_min(name, start_unix_nano))
    AS root_name,
  list(DISTINCT target_id ORDER BY target_id) FILTER (WHERE target_id IS NOT NULL) AS targets,
  list(DISTINCT {_MODEL} ORDER BY {_MODEL}) FILTER (WHERE {_MODEL} IS NOT NULL) AS models,
  sum(cost_usd) AS cost_usd, count(cost_usd) AS priced_spans,
  sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
  count(*) FILTER (WHERE {ERROR_SPAN}) AS errors,
  sum(retries) AS retries, sum(tool_calls) AS tool_calls
FROM {SPANS_TABLE}
GROUP BY trace_id
HAVING {" AND ".join(having)}
ORDER BY start_time DESC, trace_id LIMIT {int(limit)}"""


TRACE_SPAN_COLUMNS = (
    "span_id", "parent_span_id", "name", "kind", "start_unix_nano", "end_unix_nano", "start_time", "duration_s",
    "status_code", "status_message", "service_name", "target_id", "role", "task_id", "case_id", "assessment_id",
    "operation", "provider", "request_model", "response_model", "input_tokens", "output_tokens",
    "cache_read_tokens", "reasoning_tokens", "cost_usd", "ttft_s", "retries", "tool_calls", "agent_step",
    "tool_name", "outcome_success", "quality_score", "error_type", "attributes", "resource", "events",
)


def trace_sql(trace_id: str) -> str:
    if not (len(trace_id) == 32 and all(ch in "0123456789abcdef" for ch in trace_id)):
        raise BadParameter(f"trace must be 32 lowercase hex characters, got {trace_id!r}")
    columns = ", ".join(TRACE_SPAN_COLUMNS)
    return f"SELECT {columns} FROM {SPANS_TABLE} WHERE trace_id = '{trace_id}' ORDER BY start_unix_nano, span_id"


def spans_by_key_sql(keys: list[str]) -> str:
    """Trace, name, start and duration of the spans named by 'trace_id:span_id' keys."""
    listed = ", ".join(sql_string(k) for k in keys) or "NULL"
    return (f"SELECT trace_id || ':' || span_id AS key, trace_id, span_id, name, start_time, duration_s "
            f"FROM {SPANS_TABLE} WHERE trace_id || ':' || span_id IN ({listed})")
