"""Per-task samples of one target and scope: the values a window aggregates, one row per task.

The dashboard plots these (the latency distribution, cost per task). The tasks are built exactly
as the processor builds them for the windows (the same flagged spans, scoping and task fields of
`_tasks`), and each value is the metric's own per-task sample expression, so a plot and its
window always agree; a task without a value for a metric has NULL there, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from meritlens.analytics._catalogue import SampleUnit
from meritlens.analytics._definitions import WINDOW_DEFINITIONS
from meritlens.analytics._sql import sql_string
from meritlens.analytics._tasks import flagged_spans_sql, task_columns_sql
from meritlens.analytics._windows import SCOPE_ALL

TASK_SAMPLE_METRICS: tuple[str, ...] = ("end_to_end_latency", "total_task_cost")
"""The metrics the dashboard plots per task."""


def task_samples_sql(target: str, scope: str, limit: int, metrics: Sequence[str] = TASK_SAMPLE_METRICS) -> str:
    """SQL for the most recent ``limit`` tasks of ``target`` in ``scope`` (by the end time of their
    last span), with columns ``task_key, span_count, first_start, last_end, total_tasks`` and one
    column per metric (its per-task sample).

    Raises KeyError for a metric that is not a task-level span window."""
    definitions = {d.metric: d for d in WINDOW_DEFINITIONS if d.spec.sample_unit is SampleUnit.TASK}
    unknown = [m for m in metrics if m not in definitions]
    if unknown:
        raise KeyError(f"no per-task sample for {', '.join(unknown)}")
    values = ",\n    ".join(f"CAST({definitions[m].sample_sql} AS DOUBLE) AS {m}" for m in metrics)
    scope_filter = "" if scope == SCOPE_ALL else f"WHERE assessment_id = {sql_string(scope)}"
    return f"""
WITH {flagged_spans_sql(f" AND target_id = {sql_string(target)}")},
scoped AS (SELECT * FROM flagged {scope_filter}),
task_rows AS (
  SELECT task_key, {task_columns_sql()}
  FROM scoped GROUP BY task_key
)
SELECT task_key, spans AS span_count, start_time AS first_start, end_time AS last_end,
    {values},
    count(*) OVER () AS total_tasks
FROM task_rows
ORDER BY last_end DESC, task_key
LIMIT {int(limit)}
"""
