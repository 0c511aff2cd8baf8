"""What the store creates at start: the tables and the SQL views users query.

- `tasks`: one row per (target, task) with the task fields the windows are computed from;
- `coverage`: the latest readiness check per (target, scope), with `missing` and `ready`
  derived from the stored sets;
- `catalogue`: the metric catalogue, to join windows with units and directions.
"""

from __future__ import annotations

from meritlens.analytics._catalogue import CATALOGUE
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._schema import (
    COVERAGE_DDL,
    COVERAGE_TABLE,
    EXPERIMENT_ARMS_DDL,
    EXPERIMENTS_DDL,
    SPANS_DDL,
    WINDOW_BUCKET_CUTOFFS_DDL,
    WINDOW_BUCKET_STATE_DDL,
    WINDOW_STATE_DDL,
    WINDOW_WATERMARK_DDL,
    WINDOWS_BY_TIME_DDL,
    WINDOWS_DDL,
)
from meritlens.analytics._sql import sql_string
from meritlens.analytics._tasks import tasks_view_sql

TASKS_VIEW = "tasks"
COVERAGE_VIEW = "coverage"
CATALOGUE_VIEW = "catalogue"

COVERAGE_VIEW_DDL = f"""CREATE OR REPLACE VIEW {COVERAGE_VIEW} AS
SELECT target_id, scope, checked_at, required, covered,
  list_filter(required, lambda m: NOT list_contains(covered, m)) AS missing,
  list_has_all(covered, required) AS ready,
  list_has_all(covered, required) AND len(shortfalls) = 0 AS baseline_ready,
  shortfalls, report
FROM {COVERAGE_TABLE}
QUALIFY row_number() OVER (PARTITION BY target_id, scope ORDER BY checked_at DESC) = 1"""


def _catalogue_row(position: int, spec) -> str:
    allowed = ", ".join(sql_string(a.value) for a in spec.allowed_aggregations)
    values = (
        str(position), sql_string(spec.id), sql_string(spec.group.value), sql_string(spec.kind.value),
        sql_string(spec.unit), sql_string(spec.direction.value), str(spec.ratio).lower(),
        str(spec.reliability).lower(), sql_string(spec.default_aggregation.value), f"[{allowed}]",
        sql_string(spec.sample_unit.value), sql_string(spec.source.value),
        sql_string("span window" if spec.id in SPAN_WINDOW_METRICS else "plugin or evaluator"),
        sql_string(spec.description),
    )
    return f"({', '.join(values)})"


_CATALOGUE_ROWS = ",\n  ".join(_catalogue_row(i, spec) for i, spec in enumerate(CATALOGUE))
CATALOGUE_VIEW_DDL = f"""CREATE OR REPLACE VIEW {CATALOGUE_VIEW} AS
SELECT * FROM (VALUES
  {_CATALOGUE_ROWS}
) AS c(position, metric, "group", kind, unit, direction, ratio, reliability, default_aggregation,
       allowed_aggregations, sample_unit, source, computed_by, description)"""

STORE_DDL: tuple[str, ...] = (
    SPANS_DDL,
    WINDOWS_DDL,
    COVERAGE_DDL,
    EXPERIMENTS_DDL,
    EXPERIMENT_ARMS_DDL,
    WINDOW_WATERMARK_DDL,
    WINDOW_STATE_DDL,
    WINDOWS_BY_TIME_DDL,
    WINDOW_BUCKET_STATE_DDL,
    WINDOW_BUCKET_CUTOFFS_DDL,
    tasks_view_sql(TASKS_VIEW),
    COVERAGE_VIEW_DDL,
    CATALOGUE_VIEW_DDL,
)
"""Every statement a writable store runs at start, in order (idempotent)."""
