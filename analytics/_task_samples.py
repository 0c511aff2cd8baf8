"""Per-task samples of one target and scope: the values a window aggregates, one row per task.

The dashboard plots these (the latency distribution, cost per task). Each value comes from the
same per-task expression as the window (`WINDOW_DEFINITIONS`), so a plot and its window always
agree; a task without a value for a metric has NULL there, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from meritlens.analytics._schema import SPANS_TABLE
from meritlens.analytics._windows import SCOPE_ALL, WINDOW_DEFINITIONS
from meritlens.instrumentation.conventions import ROLE_APPLICATION

TASK_SAMPLE_METRICS: tuple[str, ...] = ("end_to_end_latency", "total_task_cost")
"""The metrics the dashboard plots per task."""


def sql_literal(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def task_samples_sql(target: str, scope: str, limit: int, metrics: Sequence[str] = TASK_SAMPLE_METRICS) -> str:
    """SQL for the most recent ``limit`` tasks of ``target`` in ``scope`` (by the end time of their
    last span), with columns ``task_key, span_count, first_start, last_end, total_tasks`` and one
    column per metric.

    Raises KeyError for a metric that has no per-task definition."""
    definitions = {d.metric: d for d in WINDOW_DEFINITIONS}
    unknown = [m for m in metrics if m not in definitions]
    if unknown:
        raise KeyError(f"no per-task definition for {', '.join(unknown)}")
    values = ",\n    ".join(f"CAST({definitions[m].task_value_sql} AS DOUBLE) AS {m}" for m in metrics)
    scope_filter = "" if scope == SCOPE_ALL else f" AND assessment_id = {sql_literal(scope)}"
    return f"""
WITH scoped AS (
  SELECT *, coalesce(task_id, trace_id) AS task_key FROM {SPANS_TABLE}
  WHERE target_id = {sql_literal(target)} AND role = '{ROLE_APPLICATION}'{scope_filter}
)
SELECT task_key, count(*) AS span_count, min(start_time) AS first_start, max(end_time) AS last_end,
    {values},
    count(*) OVER () AS total_tasks
FROM scoped GROUP BY task_key
ORDER BY last_end DESC, task_key
LIMIT {int(limit)}
"""
