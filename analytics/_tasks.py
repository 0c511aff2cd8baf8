"""Which spans are what, and the fields of a task: the one definition of an application span, a
span's task, an LLM call, a tool span and an error, read by the windows, the `tasks` view, the
dashboard and the experiments' checks alike.

A task is the set of a target's application-role spans sharing ``meritlens.task.id``, or one trace
when no task id was set. Orchestration spans are stored but belong to no task.
"""

from __future__ import annotations

from dataclasses import dataclass

from meritlens.analytics._schema import SPANS_TABLE
from meritlens.instrumentation.conventions import (
    OP_CHAT,
    OP_EMBEDDINGS,
    OP_EXECUTE_TOOL,
    OP_TEXT_COMPLETION,
    ROLE_APPLICATION,
)

APPLICATION_SPANS = f"role = '{ROLE_APPLICATION}' AND target_id IS NOT NULL"
"""The condition on a `spans` row for it to feed windows (and the `tasks` view)."""
TASK_KEY = "coalesce(task_id, trace_id)"
"""A span's task: its task id, else its trace. Samples group a target's application spans by it."""
_LLM_OPERATIONS = ", ".join(f"'{op}'" for op in (OP_CHAT, OP_TEXT_COMPLETION, "generate_content", OP_EMBEDDINGS))
LLM_LIKE = (
    "(input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL"
    f" OR operation IN ({_LLM_OPERATIONS}))"
)
"""A span that looks like an LLM call. It is *the* call (``is_call`` of ``flagged_spans_sql``) unless
an LLM-like child sits under it: then it is a wrapper (e.g. ``@observe`` around an instrumented
client) and carries no usage of its own."""
TOOL_SPAN = f"(operation = '{OP_EXECUTE_TOOL}' OR tool_name IS NOT NULL)"
"""A tool execution."""
ERROR_SPAN = "(status_code = 2 OR error_type IS NOT NULL)"
"""A span that failed: error status, or an error type recorded."""


def flagged_spans_sql(targets_filter: str = "", source: str = SPANS_TABLE) -> str:
    """CTEs `app` and `flagged`: the application spans of ``source`` (a relation with the columns of
    `spans`) meeting ``targets_filter`` (``" AND <condition>"``, or empty), with their ``task_key``
    and the flags `is_call`, `is_tool`, `is_error` every task field reads. Whether a span is a
    wrapper is decided by every application span of its trace, whatever the filter."""
    children = "app" if not targets_filter else (
        f"(SELECT * FROM {source} WHERE {APPLICATION_SPANS} AND trace_id IN (SELECT trace_id FROM app))")
    return f"""app AS (
  SELECT *, {TASK_KEY} AS task_key FROM {source}
  WHERE {APPLICATION_SPANS}{targets_filter}
),
call_parents AS (
  SELECT DISTINCT trace_id, parent_span_id AS span_id FROM {children}
  WHERE parent_span_id IS NOT NULL AND {LLM_LIKE}
),
flagged AS (
  SELECT app.*,
    ({LLM_LIKE} AND p.span_id IS NULL) AS is_call,
    {TOOL_SPAN} AS is_tool,
    {ERROR_SPAN} AS is_error
  FROM app LEFT JOIN call_parents p ON p.trace_id = app.trace_id AND p.span_id = app.span_id
)"""


def _in_value_order(function: str, column: str, condition: str) -> str:
    """``function`` (``sum`` or ``avg``) of ``column`` over the rows meeting ``condition``, adding
    the doubles in value order, so that the result does not depend on the order the spans were
    stored in. As a sorted list's ``list_sum``/``list_avg``: the same additions in the same order as
    ``sum(x ORDER BY x)``, bit for bit, but DuckDB's ordered aggregate sorted every group through
    one shared sort (~15% of the window pass's statement when each task is one call)."""
    return f"list_{function}(list_sort(list({column}) FILTER (WHERE {condition})))"


def _sum_over_calls(column: str, *, integer: bool = False) -> str:
    """A task's total of ``column`` over its LLM calls: known only when every call reported it
    (a partial sum would understate it), NULL when no call did (never 0). Doubles are summed in
    value order (`_in_value_order`); an ``integer`` column's sum is exact in any order."""
    total = f"sum({column}) FILTER (WHERE is_call)" if integer else _in_value_order("sum", column, "is_call")
    return (
        f"CASE WHEN count({column}) FILTER (WHERE is_call) > 0"
        f" AND count({column}) FILTER (WHERE is_call) = count(*) FILTER (WHERE is_call)"
        f" THEN {total} END"
    )


@dataclass(frozen=True)
class TaskField:
    """One column of a task: an aggregate over the task's application spans (NULL when unobserved)."""

    name: str
    sql: str
    description: str


TASK_FIELDS: tuple[TaskField, ...] = (
    TaskField("task_id", "max(task_id)", "meritlens.task.id (NULL when the task is one trace without it)"),
    TaskField("assessment_id", "min(assessment_id)", "meritlens.assessment.id"),
    TaskField("case_id", "min(case_id)", "meritlens.case.id"),
    TaskField("run_id", "min(run_id)", "meritlens.run.id"),
    # as a list's distinct length, not count(DISTINCT): DuckDB then drops the aggregate from statements
    # that do not read it (the window pass's), where count(DISTINCT)'s join stayed (~15% of that statement)
    TaskField("traces", "len(list_distinct(list(trace_id)))", "traces the task spans"),
    TaskField("spans", "count(*)", "application spans of the task"),
    TaskField("llm_calls", "count(*) FILTER (WHERE is_call)", "LLM calls (wrappers around a call excluded)"),
    TaskField("start_time", "min(start_time)", "earliest span start"),
    TaskField("end_time", "max(end_time)", "latest span end"),
    TaskField("input_tokens", f"CAST({_sum_over_calls('input_tokens', integer=True)} AS BIGINT)",
              "input tokens of all calls; NULL unless every call reported them"),
    TaskField("output_tokens", f"CAST({_sum_over_calls('output_tokens', integer=True)} AS BIGINT)",
              "output tokens of all calls; NULL unless every call reported them"),
    TaskField("reasoning_tokens", f"CAST({_sum_over_calls('reasoning_tokens', integer=True)} AS BIGINT)",
              "reasoning tokens of all calls; NULL unless every call reported them"),
    TaskField("cost_usd", _sum_over_calls("cost_usd"),
              "provider cost of all calls in USD; NULL unless every call was priced"),
    TaskField("end_to_end_latency_s", "(max(end_unix_nano) - min(start_unix_nano)) / 1e9",
              "seconds from the first span start to the last span end"),
    TaskField("time_to_first_useful_output_s",
              "(min(start_unix_nano + CAST(round(ttft_s * 1e9) AS BIGINT)) - min(start_unix_nano)) / 1e9",
              "seconds from the task's start to its first streamed chunk; NULL without streaming"),
    TaskField("agent_steps", "max(agent_step)", "highest agent step recorded (the task span records the total)"),
    TaskField("retries", "CAST(sum(retries) FILTER (WHERE is_call) AS BIGINT)", "retries reported by the calls"),
    TaskField("tool_calls", "CAST(sum(tool_calls) FILTER (WHERE is_call) AS BIGINT)",
              "tool calls the model requested"),
    TaskField("tool_executions", "count(*) FILTER (WHERE is_tool)", "tool spans (executions)"),
    TaskField("failed_tool_executions", "count(*) FILTER (WHERE is_tool AND is_error)", "tool spans that failed"),
    TaskField("errors", "count(*) FILTER (WHERE is_error)", "spans with error status or error.type"),
    TaskField("outcome_success", "bool_and(outcome_success)",
              "recorded outcome (false if any recorded outcome was a failure)"),
    TaskField("quality_score", _in_value_order("avg", "quality_score", "quality_score BETWEEN 0 AND 1"),
              "recorded quality score in [0, 1] (mean if several)"),
    TaskField("human_intervention", "bool_or(human_intervention)", "a person had to step in"),
)
TASK_INTERNALS = (
    "min(start_unix_nano) AS start_ns",
    "max(end_unix_nano) AS end_ns",
    "min(end_time) AS first_end",
    "max(end_time) AS last_end",
)


def task_columns_sql() -> str:
    """The task fields as select-list items over `flagged` rows grouped by task."""
    return ",\n    ".join(f"{f.sql} AS {f.name}" for f in TASK_FIELDS)


def tasks_view_sql(view_name: str) -> str:
    """DDL of the `tasks` view: one row per (target, task) with the task fields."""
    return f"""CREATE OR REPLACE VIEW {view_name} AS
WITH {flagged_spans_sql()}
SELECT target_id, task_key,
    {task_columns_sql()}
FROM flagged GROUP BY target_id, task_key"""
