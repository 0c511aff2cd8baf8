"""The samples of a set of spans, as SQL: every (target, scope)'s samples and facts in one
statement for the processor (``sample_rows_sql``), and the samples behind one window
(``window_samples_sql``), computed exactly alike.

Samples are tasks or calls (the catalogue's sample unit). Spans fall into a window by their own end
time.
"""

from __future__ import annotations

from meritlens.analytics._catalogue import SampleUnit
from meritlens.analytics._definitions import (
    DEFINITIONS_BY_METRIC,
    FACT_PREFIX,
    FACTS,
    SPAN_WINDOW_METRICS,
    WINDOW_DEFINITIONS,
)
from meritlens.analytics._sql import sql_string
from meritlens.analytics._tasks import TASK_INTERNALS, flagged_spans_sql, task_columns_sql
from meritlens.analytics._windows import SCOPE_ALL

SAMPLE_VALUES: tuple[str, ...] = SPAN_WINDOW_METRICS + tuple(FACT_PREFIX + name for name in FACTS)
"""The value columns of ``sample_rows_sql``: one per window metric (the row's sample of it) and one
per fact (1 when the fact holds for the row), NULL when the row gives none."""
SAMPLE_ROW_COLUMNS = ("target_id", "scope", "first_end_us", "last_end_us", "start_ns", "end_ns", "success",
                      "span_count", "key_high", "key_low") + SAMPLE_VALUES
"""Columns of ``sample_rows_sql``: one row per task, and per application span, with a sample or a fact."""

_SPAN_KEY = "trace_id || ':' || span_id"
KEY_HIGH = f"CAST(span_md5 & {(1 << 64) - 1}::UHUGEINT AS UBIGINT)"
KEY_LOW = "CAST(span_md5 >> 64 AS UBIGINT)"
"""The halves of a span key's md5 (`span_md5`, from md5_number() once per span): its low 64 bits are
md5_number_upper (the md5's first 8 bytes read little-endian), its high 64 bits md5_number_lower.
Their sums are the evidence digest's (`_evidence.digest_from_sums`)."""
_TASK_ROW_COLUMNS = ("first_end", "last_end", "start_ns", "end_ns", "outcome_success AS success",
                     "span_count", "key_high", "key_low")
_CALL_ROW_COLUMNS = ("end_time AS first_end", "end_time AS last_end", "start_unix_nano AS start_ns",
                     "end_unix_nano AS end_ns", "NULL::BOOLEAN AS success", "1 AS span_count",
                     f"{KEY_HIGH} AS key_high", f"{KEY_LOW} AS key_low")


def _scoped_sql(source: str) -> str:
    """CTEs up to `scoped` (every application span of ``source`` once in scope 'all' and once in its
    assessment's scope) and `tasks` (one row per (target, scope, task))."""
    return f"""WITH {flagged_spans_sql(source=source)},
keyed AS (
  SELECT *, md5_number({_SPAN_KEY}) AS span_md5 FROM flagged
),
scoped AS (
  SELECT *, '{SCOPE_ALL}' AS scope FROM keyed
  UNION ALL
  SELECT *, assessment_id AS scope FROM keyed WHERE assessment_id IS NOT NULL
),
tasks AS (
  SELECT target_id, scope, task_key,
    {task_columns_sql()},
    {", ".join(TASK_INTERNALS)},
    count(*) AS span_count,
    CAST(sum({KEY_HIGH}) % {1 << 64} AS UBIGINT) AS key_high,
    CAST(sum({KEY_LOW}) % {1 << 64} AS UBIGINT) AS key_low
  FROM scoped GROUP BY target_id, scope, task_key
)"""


def _samples_sql(unit: SampleUnit, rows: str, columns: tuple[str, ...]) -> str:
    """The rows of ``rows`` that give a sample of a metric of ``unit`` or for which a fact of
    ``unit`` holds, with their sample of each such metric and a 1 per fact that holds (the value
    columns of ``SAMPLE_VALUES``; the other unit's are NULL)."""
    values = {d.metric: d.sample_sql for d in WINDOW_DEFINITIONS if d.spec.sample_unit is unit}
    values.update({FACT_PREFIX + name: f"CASE WHEN {cond} THEN 1 END"
                   for name, (fact_unit, cond) in FACTS.items() if fact_unit is unit})
    samples = ", ".join(f"CAST({sql} AS DOUBLE) AS {name}" for name, sql in values.items())
    return (
        f"SELECT * FROM (SELECT target_id, scope, {', '.join(columns)}, {samples} FROM {rows})"
        f" WHERE coalesce({', '.join(values)}) IS NOT NULL"
    )


WINDOW_INPUT_COLUMNS = (
    "trace_id", "span_id", "parent_span_id", "start_unix_nano", "end_unix_nano", "start_time", "end_time",
    "status_code", "target_id", "role", "task_id", "case_id", "run_id", "assessment_id", "operation",
    "input_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "ttft_s", "retries", "tool_calls",
    "agent_step", "tool_name", "outcome_success", "quality_score", "human_intervention", "error_type",
    "received_at",
)
"""The span columns the windows are computed from: what `sample_rows_sql` reads, and the keys and
commit time the window processor uses. The processor keeps only these of a committed batch until
its pass, and reads only these back from stored spans; the large JSON columns (attributes,
resource, events, links) are not among them. A definition that reads another column must add it
here (tests/collector/windows/test_window_input_columns.py fails otherwise)."""


def sample_rows_sql(source: str) -> str:
    """Every sample the spans of ``source`` give, for every (target, scope): one row
    (``SAMPLE_ROW_COLUMNS``) per task and per application span with a sample or a fact, its value
    columns (``SAMPLE_VALUES``) holding the samples and facts, NULL where it gives none. One row
    per sample source rather than per (sample, metric): a task's samples share its times and keys.

    Exact for a task only when ``source`` holds all of the task's spans and every span of their
    traces (a child decides whether its parent is an LLM call)."""
    return f"""{_scoped_sql(source)}
SELECT target_id, scope, epoch_us(first_end) AS first_end_us, epoch_us(last_end) AS last_end_us,
  start_ns, end_ns, success, span_count, key_high, key_low, {", ".join(SAMPLE_VALUES)}
FROM (
  {_samples_sql(SampleUnit.TASK, "tasks", _TASK_ROW_COLUMNS)}
  UNION ALL BY NAME
  {_samples_sql(SampleUnit.CALL, "scoped", _CALL_ROW_COLUMNS)}
)"""


# --- the samples behind a window ---------------------------------------------------------------------
SAMPLE_COLUMNS = ("sample_key", "task_key", "case_id", "v", "outcome_success", "span_keys")
"""Columns of ``window_samples_sql``: one row per sample that fed the window."""


def window_samples_sql(target_id: str, scope: str, metric: str) -> str:
    """The samples that feed the window (target_id, metric, scope), one row each (``SAMPLE_COLUMNS``),
    computed exactly as the processor computes them: ``v`` is the sample's value, ``case_id`` the
    case of its task, ``span_keys`` the 'trace_id:span_id' of the spans behind it (the window's
    evidence digest is ``span_keys_digest`` of all these keys)."""
    definition = DEFINITIONS_BY_METRIC.get(metric)
    if definition is None:
        raise KeyError(f"no span window is defined for {metric!r}")
    scope_filter = "" if scope == SCOPE_ALL else f" WHERE assessment_id = {sql_string(scope)}"
    head = f"""WITH {flagged_spans_sql(f" AND target_id = {sql_string(target_id)}")},
scoped AS (SELECT * FROM flagged{scope_filter}),
tasks AS (
  SELECT target_id, task_key,
    {task_columns_sql()},
    list(trace_id || ':' || span_id) AS span_keys
  FROM scoped GROUP BY target_id, task_key
)"""
    if definition.spec.sample_unit is SampleUnit.TASK:
        return f"""{head}
SELECT * FROM (
  SELECT task_key AS sample_key, task_key, case_id, CAST({definition.sample_sql} AS DOUBLE) AS v,
    outcome_success, span_keys
  FROM tasks
) WHERE v IS NOT NULL ORDER BY sample_key"""
    return f"""{head}
SELECT * FROM (
  SELECT c.trace_id || ':' || c.span_id AS sample_key, c.task_key, t.case_id, c.v,
    NULL::BOOLEAN AS outcome_success, [c.trace_id || ':' || c.span_id] AS span_keys
  FROM (SELECT *, CAST({definition.sample_sql} AS DOUBLE) AS v FROM scoped) c
  JOIN tasks t ON t.task_key = c.task_key
) WHERE v IS NOT NULL ORDER BY sample_key"""
