"""The window model and the window definitions (data plus SQL, in one place).

A window is the cumulative aggregate of one catalogue metric for one target over one scope
(``all``, or an assessment id). The processor recomputes the windows of the (target, scope)
keys a batch touched and *replaces* the stored rows: counts are never added across windows.

Samples are tasks: a task is the set of a target's application-role spans sharing
``meritlens.task.id``, or one trace when no task id was set. Spans fall into a window by their
own end time. Orchestration spans are stored but never feed a window.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from enum import Enum

from meritlens.analytics._catalogue import Aggregation, METRICS, REPEATED_RUN_AGGREGATIONS
from meritlens.analytics._schema import SPANS_TABLE, WINDOW_COLUMN_NAMES, WINDOWS_TABLE
from meritlens.instrumentation.conventions import ROLE_APPLICATION

SCOPE_ALL = "all"
EVIDENCE_MEDIA_TYPE = "application/vnd.meritlens.span-set"
"""Evidence of a computed window: the set of spans that fed it, identified by `trace_id:span_id`."""
MIN_SAMPLES_FOR_REPEATED_CLAIM = 2
"""A rate, mean, distribution or percentile from fewer samples is not a measurement."""


class WindowState(str, Enum):
    MEASURED = "measured"
    NOT_APPLICABLE = "not_applicable"
    NOT_CONFIGURED = "not_configured"
    INSUFFICIENT_EVIDENCE = "insufficient_evidence"


@dataclass(frozen=True)
class Window:
    """One stored row of the `windows` table."""

    target_id: str
    metric: str
    scope: str
    aggregation: str
    value: float | None
    unit: str
    sample_count: int
    state: str
    count: int | None
    mean: float | None
    min: float | None
    max: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    first_span_time: _dt.datetime | None
    last_span_time: _dt.datetime | None
    evidence_uri: str | None
    evidence_media_type: str | None
    evidence_digest: str | None
    computed_at: _dt.datetime

    @classmethod
    def from_row(cls, row: tuple) -> "Window":
        return cls(**dict(zip(WINDOW_COLUMN_NAMES, row)))


@dataclass(frozen=True)
class WindowDefinition:
    """How one metric's per-task sample is computed from the spans of a task (SQL over `scoped`)."""

    metric: str
    task_value_sql: str
    """An aggregate expression over one task's application spans; NULL when the task has no value."""

    @property
    def aggregation(self) -> Aggregation:
        return METRICS[self.metric].default_aggregation


# A span that is an LLM call (as opposed to a task root, a tool or an HTTP span).
_IS_LLM_CALL = (
    "(input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL"
    " OR operation IN ('chat', 'text_completion', 'generate_content', 'embeddings'))"
)

WINDOW_DEFINITIONS: tuple[WindowDefinition, ...] = (
    WindowDefinition("input_tokens", "sum(input_tokens)"),
    WindowDefinition("output_tokens", "sum(output_tokens)"),
    # A task's cost is known only when every LLM call in it was priced: a partial sum would
    # understate it, and a task with no priced call has no cost (never 0).
    WindowDefinition(
        "total_task_cost",
        f"CASE WHEN count(cost_usd) > 0 AND count(cost_usd) = count(*) FILTER (WHERE {_IS_LLM_CALL})"
        " THEN sum(cost_usd) END",
    ),
    WindowDefinition("end_to_end_latency", "(max(end_unix_nano) - min(start_unix_nano)) / 1e9"),
)
WINDOWED_METRICS: tuple[str, ...] = tuple(d.metric for d in WINDOW_DEFINITIONS)


def _value_sql(aggregation: Aggregation) -> str:
    return {
        Aggregation.SUM: "a.total",
        Aggregation.MEAN: "a.mean",
        Aggregation.RATE: "a.mean",
        Aggregation.SINGLE_VALUE: "CASE WHEN a.n = 1 THEN a.total END",
        Aggregation.DISTRIBUTION: "a.mean",
        Aggregation.PERCENTILE: "a.q[3]",
    }[aggregation]


def _min_samples(aggregation: Aggregation) -> int:
    return MIN_SAMPLES_FOR_REPEATED_CLAIM if aggregation in REPEATED_RUN_AGGREGATIONS else 1


def refresh_windows_sql(touched_table: str, db_name: str) -> str:
    """SQL that inserts-or-replaces every defined window of the (target_id, scope) keys in
    ``touched_table``. Each key gets one row per defined metric, measured or not."""
    task_columns = ",\n    ".join(f"{d.task_value_sql} AS {d.metric}" for d in WINDOW_DEFINITIONS)
    unpivot = "\n  UNION ALL ".join(
        f"SELECT target_id, scope, task_key, first_end, last_end, span_keys, '{d.metric}' AS metric,"
        f" CAST({d.metric} AS DOUBLE) AS v FROM tasks"
        for d in WINDOW_DEFINITIONS
    )
    definitions = ", ".join(
        f"('{d.metric}', '{d.aggregation.value}', '{METRICS[d.metric].unit}', {_min_samples(d.aggregation)})"
        for d in WINDOW_DEFINITIONS
    )
    value_cases = " ".join(
        f"WHEN '{agg.value}' THEN {_value_sql(agg)}" for agg in Aggregation
    )
    uri = (
        f"'meritlens://{db_name}/spans?target_id=' || url_encode(k.target_id) || '&scope=' || "
        "url_encode(k.scope) || '&metric=' || d.metric"
    )
    return f"""
INSERT OR REPLACE INTO {WINDOWS_TABLE} ({", ".join(WINDOW_COLUMN_NAMES)})
WITH scoped AS (
  SELECT s.*, t.scope, coalesce(s.task_id, s.trace_id) AS task_key
  FROM {SPANS_TABLE} s JOIN {touched_table} t
    ON s.target_id = t.target_id AND (t.scope = '{SCOPE_ALL}' OR s.assessment_id = t.scope)
  WHERE s.role = '{ROLE_APPLICATION}'
),
tasks AS (
  SELECT target_id, scope, task_key,
    {task_columns},
    min(end_time) AS first_end, max(end_time) AS last_end,
    list(trace_id || ':' || span_id) AS span_keys
  FROM scoped GROUP BY target_id, scope, task_key
),
samples AS (
  {unpivot}
),
agg AS (
  SELECT target_id, scope, metric,
    count(v) AS n, sum(v) AS total, avg(v) AS mean, min(v) AS lo, max(v) AS hi,
    quantile_cont(v, [0.5, 0.9, 0.95, 0.99]) AS q,
    min(first_end) FILTER (WHERE v IS NOT NULL) AS first_end,
    max(last_end) FILTER (WHERE v IS NOT NULL) AS last_end,
    sha256(array_to_string(list_sort(flatten(list(span_keys) FILTER (WHERE v IS NOT NULL))), chr(10))) AS digest
  FROM samples GROUP BY target_id, scope, metric
),
defs(metric, aggregation, unit, min_samples) AS (VALUES {definitions})
SELECT k.target_id, d.metric, k.scope, d.aggregation,
  CASE WHEN coalesce(a.n, 0) = 0 THEN NULL ELSE CASE d.aggregation {value_cases} END END AS value,
  d.unit,
  coalesce(a.n, 0) AS sample_count,
  CASE WHEN coalesce(a.n, 0) = 0 THEN '{WindowState.NOT_CONFIGURED.value}'
       WHEN a.n < d.min_samples THEN '{WindowState.INSUFFICIENT_EVIDENCE.value}'
       ELSE '{WindowState.MEASURED.value}' END AS state,
  CASE WHEN a.n > 0 THEN a.n END AS count,
  a.mean, a.lo, a.hi, a.q[1], a.q[2], a.q[3], a.q[4],
  a.first_end, a.last_end,
  CASE WHEN a.n > 0 THEN {uri} END AS evidence_uri,
  CASE WHEN a.n > 0 THEN '{EVIDENCE_MEDIA_TYPE}' END AS evidence_media_type,
  CASE WHEN a.n > 0 THEN a.digest END AS evidence_digest,
  now() AS computed_at
FROM {touched_table} k CROSS JOIN defs d
LEFT JOIN agg a ON a.target_id = k.target_id AND a.scope = k.scope AND a.metric = d.metric
"""


def all_keys_sql() -> str:
    """SQL listing every (target_id, scope) key the stored spans define."""
    return f"""
SELECT DISTINCT target_id, '{SCOPE_ALL}' AS scope FROM {SPANS_TABLE}
  WHERE target_id IS NOT NULL AND role = '{ROLE_APPLICATION}'
UNION
SELECT DISTINCT target_id, assessment_id FROM {SPANS_TABLE}
  WHERE target_id IS NOT NULL AND assessment_id IS NOT NULL AND role = '{ROLE_APPLICATION}'
"""
