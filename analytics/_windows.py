"""The window model and the window definitions (data plus SQL, in one place).

A window is the cumulative aggregate of one catalogue metric for one target over one scope
(``all``, or an assessment id). The processor (``_accumulate``) keeps mergeable state per window
and, for each batch, applies only the samples of the tasks the batch touched (their samples
before the batch are taken out, their samples after it put in); it *replaces* the stored rows,
so a window always equals a computation from scratch over every stored span.

Samples are tasks or calls (the catalogue's sample unit). A task is the set of a target's
application-role spans sharing ``meritlens.task.id``, or one trace when no task id was set.
Spans fall into a window by their own end time. Orchestration spans are stored but never feed a
window. The processor writes only the metrics defined here (``SPAN_WINDOW_METRICS``); metrics
that only an evaluator or plugin can compute are written by them into the same table.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import math
import os
import urllib.parse
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from meritlens.analytics._catalogue import (
    METRICS,
    Aggregation,
    CATALOGUE,
    MetricSpec,
    REPEATED_RUN_AGGREGATIONS,
    SampleUnit,
)
from meritlens.analytics._schema import SPANS_TABLE, WINDOW_COLUMN_NAMES, WINDOWS_TABLE
from meritlens.instrumentation.conventions import (
    OP_CHAT,
    OP_EMBEDDINGS,
    OP_EXECUTE_TOOL,
    OP_TEXT_COMPLETION,
    ROLE_APPLICATION,
)

SCOPE_ALL = "all"
EVIDENCE_MEDIA_TYPE = "application/vnd.meritlens.span-set"
"""Evidence of a computed window: the set of spans that fed it, identified by `trace_id:span_id`."""
MIN_SAMPLES_FOR_REPEATED_CLAIM = 2
"""A rate, mean, distribution, percentile or reliability value from fewer samples is not a measurement."""
SIGNAL_TYPE = "metric_window_available"


EVALUATED_SUFFIX = ".evaluated"
"""`meritlens evaluate` stores its result for a metric the processor also computes as
``<metric>.evaluated`` (the processor replaces the bare-name window on every batch)."""


class WindowState(str, Enum):
    """Every metric of a target is in exactly one of these states."""

    MEASURED = "measured"
    NOT_APPLICABLE = "not_applicable"
    NOT_CONFIGURED = "not_configured"
    INSUFFICIENT_EVIDENCE = "insufficient_evidence"


_TIME_COLUMNS = ("first_span_time", "last_span_time", "computed_at")


@dataclass(frozen=True)
class Window:
    """One row of the `windows` table (``computed_at`` is None for a metric no window was stored for)."""

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
    computed_at: _dt.datetime | None
    stddev: float | None = None
    quantile_error: float | None = None
    """Relative error bound of min, max and p50-p99: 0 when exact, None without a distribution."""

    @classmethod
    def from_row(cls, row: tuple, columns: tuple[str, ...] | list[str] = WINDOW_COLUMN_NAMES) -> "Window":
        """A window from a query row; timestamps given as ISO text (through a collector) are parsed."""
        values = dict(zip(columns, row))
        for name in _TIME_COLUMNS:
            if isinstance(values.get(name), str):
                values[name] = _dt.datetime.fromisoformat(values[name])
        return cls(**{name: values.get(name) for name in WINDOW_COLUMN_NAMES})

    @property
    def finite_value(self) -> float | None:
        """The value when it is a finite number, else None."""
        if self.value is None or not math.isfinite(self.value):
            return None
        return float(self.value)

    @property
    def has_evidence(self) -> bool:
        return bool(self.evidence_uri) and bool(self.evidence_digest)

    def value_as(self, aggregation: Aggregation) -> float | None:
        """The window's value expressed in ``aggregation``, when the window holds enough to say it.

        The stored aggregation gives ``value``; the distribution summary gives the others
        (sum = mean x count, percentile = p95); a single value exists only for one sample.
        """
        if aggregation.value == self.aggregation:
            return self.finite_value
        if self.count is None or self.mean is None:
            return None
        derived = {
            Aggregation.MEAN: self.mean,
            Aggregation.RATE: self.mean,
            Aggregation.DISTRIBUTION: self.mean,
            Aggregation.SUM: self.mean * self.count,
            Aggregation.PERCENTILE: self.p95,
            Aggregation.SINGLE_VALUE: self.mean if self.count == 1 else None,
        }[aggregation]
        return derived if derived is not None and math.isfinite(derived) else None

    def to_signal(self) -> dict:
        """This window as a `metric_window_available` signal (JSON-ready)."""
        return {
            "type": SIGNAL_TYPE,
            "target_id": self.target_id,
            "metric": self.metric,
            "scope": self.scope,
            "aggregation": self.aggregation,
            "value": self.finite_value,
            "unit": self.unit,
            "sample_count": self.sample_count,
            "state": self.state,
            "summary": {
                name: getattr(self, name) for name in ("count", "mean", "stddev", "min", "max", "p50", "p90", "p95", "p99",
                                                  "quantile_error")
            },
            "first_span_time": _iso(self.first_span_time),
            "last_span_time": _iso(self.last_span_time),
            "evidence": {
                "uri": self.evidence_uri,
                "media_type": self.evidence_media_type,
                "digest": self.evidence_digest,
            } if self.has_evidence else None,
            "computed_at": _iso(self.computed_at),
        }


def _iso(value: _dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# --- spans and tasks ------------------------------------------------------------------------------
_LLM_OPERATIONS = ", ".join(f"'{op}'" for op in (OP_CHAT, OP_TEXT_COMPLETION, "generate_content", OP_EMBEDDINGS))
_LLM_LIKE = (
    "(input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL"
    f" OR operation IN ({_LLM_OPERATIONS}))"
)
"""A span that looks like an LLM call. It is *the* call unless an LLM-like child sits under it
(then it is a wrapper, e.g. ``@observe`` around an instrumented client, and carries no usage)."""
_TOOL_SPAN = f"(operation = '{OP_EXECUTE_TOOL}' OR tool_name IS NOT NULL)"
_ERROR = "(status_code = 2 OR error_type IS NOT NULL)"


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
# Columns the processor needs besides the task fields.
_TASK_INTERNALS = (
    "min(start_unix_nano) AS start_ns",
    "max(end_unix_nano) AS end_ns",
    "min(end_time) AS first_end",
    "max(end_time) AS last_end",
)


APPLICATION_SPANS = f"role = '{ROLE_APPLICATION}' AND target_id IS NOT NULL"
"""The condition on a `spans` row for it to feed windows (and the `tasks` view)."""
TASK_KEY = "coalesce(task_id, trace_id)"
"""A span's task: its task id, else its trace. Samples group a target's application spans by it."""


def _flagged_spans_sql(targets_filter: str, source: str = SPANS_TABLE) -> str:
    """CTEs `app` and `flagged`: the application spans (of the filtered targets) of ``source`` (a
    relation with the columns of `spans`) with their ``task_key`` and the flags `is_call`, `is_tool`,
    `is_error` every task field reads."""
    return f"""app AS (
  SELECT *, {TASK_KEY} AS task_key FROM {source}
  WHERE {APPLICATION_SPANS}{targets_filter}
),
call_parents AS (
  SELECT DISTINCT trace_id, parent_span_id AS span_id FROM app
  WHERE parent_span_id IS NOT NULL AND {_LLM_LIKE}
),
flagged AS (
  SELECT app.*,
    ({_LLM_LIKE} AND p.span_id IS NULL) AS is_call,
    {_TOOL_SPAN} AS is_tool,
    {_ERROR} AS is_error
  FROM app LEFT JOIN call_parents p ON p.trace_id = app.trace_id AND p.span_id = app.span_id
)"""


def _task_columns_sql() -> str:
    return ",\n    ".join(f"{f.sql} AS {f.name}" for f in TASK_FIELDS)


def tasks_view_sql(view_name: str) -> str:
    """DDL of the `tasks` view: one row per (target, task) with the task fields."""
    return f"""CREATE OR REPLACE VIEW {view_name} AS
WITH {_flagged_spans_sql("")}
SELECT target_id, task_key,
    {_task_columns_sql()}
FROM flagged GROUP BY target_id, task_key"""


# --- window definitions ---------------------------------------------------------------------------
class ValueRule(str, Enum):
    """How a window's value comes from its samples."""

    AGGREGATE = "aggregate"
    """The metric's aggregation of the samples (sum, mean, rate, p95, or the single value)."""
    PER_SUCCESS = "per_success"
    """Sum of the samples (tasks with a known outcome) over the successful tasks among them."""
    THROUGHPUT = "throughput"
    """Samples per second between the first sample's start and the last one's end (two or more)."""


FACTS: dict[str, tuple[SampleUnit, str]] = {
    "tasks": (SampleUnit.TASK, "true"),
    "tasks_with_reasoning_tokens": (SampleUnit.TASK, "reasoning_tokens IS NOT NULL"),
    "tasks_with_outcome": (SampleUnit.TASK, "outcome_success IS NOT NULL"),
    "tasks_with_cost": (SampleUnit.TASK, "cost_usd IS NOT NULL"),
    "calls_reporting_tool_calls": (SampleUnit.CALL, "is_call AND tool_calls IS NOT NULL"),
    "calls_requesting_tools": (SampleUnit.CALL, "is_call AND tool_calls > 0"),
}
"""Counts kept per (target, scope) that decide whether a metric's sources were observed: each is
the number of tasks (or application spans) of the scope for which the condition holds. They travel
with the samples as rows of the metric ``FACT_PREFIX + name`` (value 1), so one statement gives
both."""
FACT_PREFIX = "fact__"


@dataclass(frozen=True)
class WindowDefinition:
    """How the processor computes one metric's window.

    Rows are tasks (columns of ``TASK_FIELDS``) for task metrics, and application spans (with
    the flags ``is_call``, ``is_tool``, ``is_error``) for call metrics; ``sample_sql`` is one
    row's sample value, NULL when the row is no sample of this metric.
    """

    metric: str
    sample_sql: str
    configured_by: tuple[str, ...] = ()
    """Facts (``FACTS``) that must all have been observed for the metric's sources to count as
    configured; empty: configured exactly when the window has a sample. Else `not_configured`."""
    not_applicable_by: tuple[str, str] | None = None
    """(reported, positive): with no sample, the metric does not apply when the ``reported`` fact
    was observed and the ``positive`` one never (e.g. the calls said they requested no tools)."""
    value_rule: ValueRule = ValueRule.AGGREGATE

    @property
    def spec(self) -> MetricSpec:
        return METRICS[self.metric]

    @property
    def aggregation(self) -> Aggregation:
        return self.spec.default_aggregation

    @property
    def summarizes_samples(self) -> bool:
        """Whether the distribution summary of the samples describes the value."""
        return self.value_rule is ValueRule.AGGREGATE

    @property
    def min_samples(self) -> int:
        """Fewest samples for `measured`: a repeated-run or reliability claim needs two."""
        if self.aggregation in REPEATED_RUN_AGGREGATIONS or self.spec.reliability:
            return MIN_SAMPLES_FOR_REPEATED_CLAIM
        return 1

    def configured(self, facts: dict[str, int], samples: int) -> bool:
        if not self.configured_by:
            return samples > 0
        return all(facts.get(name, 0) > 0 for name in self.configured_by)

    def not_applicable(self, facts: dict[str, int], samples: int) -> bool:
        if self.not_applicable_by is None or samples > 0:
            return False
        reported, positive = self.not_applicable_by
        return facts.get(reported, 0) > 0 and facts.get(positive, 0) == 0


WINDOW_DEFINITIONS: tuple[WindowDefinition, ...] = (
    WindowDefinition("task_quality", "quality_score"),
    WindowDefinition("task_success", "CAST(outcome_success AS INTEGER)"),
    WindowDefinition(
        "tool_use_performance",
        "CASE WHEN is_tool THEN CAST(NOT is_error AS INTEGER) END",
        not_applicable_by=("calls_reporting_tool_calls", "calls_requesting_tools"),
    ),
    WindowDefinition(
        "reasoning_efficiency",
        "CASE WHEN outcome_success IS NOT NULL THEN reasoning_tokens END",
        configured_by=("tasks_with_reasoning_tokens", "tasks_with_outcome"),
        value_rule=ValueRule.PER_SUCCESS,
    ),
    WindowDefinition(
        "recovery_ability",
        "CASE WHEN errors > 0 OR retries > 0 THEN CAST(outcome_success AS INTEGER) END",
        configured_by=("tasks_with_outcome",),
    ),
    WindowDefinition("input_tokens", "input_tokens"),
    WindowDefinition("output_tokens", "output_tokens"),
    WindowDefinition("total_task_cost", "cost_usd"),
    WindowDefinition(
        "cost_per_successful_task",
        "CASE WHEN outcome_success IS NOT NULL THEN cost_usd END",
        configured_by=("tasks_with_cost", "tasks_with_outcome"),
        value_rule=ValueRule.PER_SUCCESS,
    ),
    WindowDefinition("agent_steps", "agent_steps"),
    WindowDefinition("time_to_first_useful_output", "time_to_first_useful_output_s"),
    WindowDefinition("end_to_end_latency", "end_to_end_latency_s"),
    WindowDefinition("throughput", "1", value_rule=ValueRule.THROUGHPUT),
    WindowDefinition("retry_rate", "CASE WHEN is_call THEN CAST(retries > 0 AS INTEGER) END"),
    WindowDefinition("human_intervention_rate", "CAST(human_intervention AS INTEGER)"),
)
DEFINITIONS_BY_METRIC: dict[str, WindowDefinition] = {d.metric: d for d in WINDOW_DEFINITIONS}
SPAN_WINDOW_METRICS: tuple[str, ...] = tuple(d.metric for d in WINDOW_DEFINITIONS)
"""The metrics whose windows the processor computes from spans (and owns in `windows`)."""
PLUGIN_ONLY_METRICS: tuple[str, ...] = tuple(m.id for m in CATALOGUE if m.id not in SPAN_WINDOW_METRICS)
"""Catalogue metrics only an evaluator or metric plugin can measure; no span window exists for them."""
WINDOWED_METRICS = SPAN_WINDOW_METRICS
"""The name this tuple had first; kept for code written against it."""


# --- the evidence digest ----------------------------------------------------------------------------
_DIGEST_MOD = 1 << 64


def span_keys_digest(keys) -> str:
    """The evidence digest of a multiset of spans given as 'trace_id:span_id' keys.

    sha256 hex of ``"<count>:<H>:<L>"``, where H and L are the sums (mod 2**64, 16 hex digits) of
    the two 64-bit little-endian halves of each key's md5. The sums make it independent of order
    and let the processor add and remove spans without rereading the others."""
    high = low = count = 0
    for key in keys:
        digest = hashlib.md5(key.encode()).digest()
        high += int.from_bytes(digest[:8], "little")
        low += int.from_bytes(digest[8:], "little")
        count += 1
    return digest_from_sums(count, high, low)


def digest_from_sums(count: int, high: int, low: int) -> str:
    """``span_keys_digest`` from the key count and the (unreduced) sums of the md5 halves."""
    text = f"{count}:{high % _DIGEST_MOD:016x}:{low % _DIGEST_MOD:016x}"
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=65_536)
def evidence_uri(db_name: str, target_id: str, scope: str, metric: str, *, sidecar=None,
                 judge_model: str | None = None) -> str:
    """Where a window's evidence can be read: the spans that fed it, plus the sidecar file and the
    judge model of an evaluated metric."""
    uri = (f"meritlens://{_quote(db_name)}/spans?target_id={_quote(target_id)}&scope={_quote(scope)}"
           f"&metric={_quote(metric)}")
    if sidecar is not None:
        uri += f"&sidecar={_quote(str(sidecar))}"
    if judge_model is not None:
        uri += f"&judge={_quote(judge_model)}"
    return uri


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


# --- samples of a set of spans ----------------------------------------------------------------------
SAMPLE_VALUES: tuple[str, ...] = SPAN_WINDOW_METRICS + tuple(FACT_PREFIX + name for name in FACTS)
"""The value columns of ``sample_rows_sql``: one per window metric (the row's sample of it) and one
per fact (1 when the fact holds for the row), NULL when the row gives none."""
SAMPLE_ROW_COLUMNS = ("target_id", "scope", "first_end_us", "last_end_us", "start_ns", "end_ns", "success",
                      "span_count", "key_high", "key_low") + SAMPLE_VALUES
"""Columns of ``sample_rows_sql``: one row per task, and per application span, with a sample or a fact."""

_SPAN_KEY = "trace_id || ':' || span_id"
# md5_number() once per span: its low 64 bits are md5_number_upper (the md5's first 8 bytes read
# little-endian), its high 64 bits md5_number_lower.
_KEY_HIGH = f"CAST(span_md5 & {(1 << 64) - 1}::UHUGEINT AS UBIGINT)"
_KEY_LOW = "CAST(span_md5 >> 64 AS UBIGINT)"
_TASK_ROW_COLUMNS = ("first_end", "last_end", "start_ns", "end_ns", "outcome_success AS success",
                     "span_count", "key_high", "key_low")
_CALL_ROW_COLUMNS = ("end_time AS first_end", "end_time AS last_end", "start_unix_nano AS start_ns",
                     "end_unix_nano AS end_ns", "NULL::BOOLEAN AS success", "1 AS span_count",
                     f"{_KEY_HIGH} AS key_high", f"{_KEY_LOW} AS key_low")


def _scoped_sql(source: str) -> str:
    """CTEs up to `scoped` (every application span of ``source`` once in scope 'all' and once in its
    assessment's scope) and `tasks` (one row per (target, scope, task))."""
    return f"""WITH {_flagged_spans_sql("", source)},
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
    {_task_columns_sql()},
    {", ".join(_TASK_INTERNALS)},
    count(*) AS span_count,
    CAST(sum({_KEY_HIGH}) % {1 << 64} AS UBIGINT) AS key_high,
    CAST(sum({_KEY_LOW}) % {1 << 64} AS UBIGINT) AS key_low
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


_ROW_SOURCES = ("_windows.py", "_accumulate.py", "_distribution.py", "_scale.py", "_catalogue.py")
"""The modules whose code computes a window row from the spans."""


def window_definitions_digest(db_name: str, scale: int) -> str:
    """A digest of everything a stored window row of the processor depends on besides the spans:
    the code of the window definitions, the accumulator and the catalogue, the package version, the
    histograms' scale and the database name (evidence URIs hold it). Rows stored under another
    digest are recomputed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("meritlens")
    except PackageNotFoundError:
        package = "unknown"
    digest = hashlib.sha256(f"{package}\n{db_name}\n{scale}\n".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _ROW_SOURCES:
        with open(os.path.join(here, name), "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()


# --- the samples behind a window ---------------------------------------------------------------------
SAMPLE_COLUMNS = ("sample_key", "task_key", "case_id", "v", "outcome_success", "span_keys")
"""Columns of ``window_samples_sql``: one row per sample that fed the window."""


def sample_statistic(metric: str) -> str | None:
    """How a window's value is computed from its samples ``v``: 'aggregate' (the aggregation of the
    samples), 'per_success' (sum of the samples over the successful tasks among them), or None when
    the value is no function of per-sample values (throughput) or no span window exists."""
    definition = DEFINITIONS_BY_METRIC.get(metric)
    if definition is None or definition.value_rule is ValueRule.THROUGHPUT:
        return None
    return definition.value_rule.value


def window_samples_sql(target_id: str, scope: str, metric: str) -> str:
    """The samples that feed the window (target_id, metric, scope), one row each (``SAMPLE_COLUMNS``),
    computed exactly as the processor computes them: ``v`` is the sample's value, ``case_id`` the
    case of its task, ``span_keys`` the 'trace_id:span_id' of the spans behind it (the window's
    evidence digest is ``span_keys_digest`` of all these keys)."""
    definition = DEFINITIONS_BY_METRIC.get(metric)
    if definition is None:
        raise KeyError(f"no span window is defined for {metric!r}")
    scope_filter = "" if scope == SCOPE_ALL else f" WHERE assessment_id = {sql_string(scope)}"
    head = f"""WITH {_flagged_spans_sql(f" AND target_id = {sql_string(target_id)}")},
scoped AS (SELECT * FROM flagged{scope_filter}),
tasks AS (
  SELECT target_id, task_key,
    {_task_columns_sql()},
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


# --- reading windows --------------------------------------------------------------------------------
def sql_string(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def catalogue_values_sql() -> str:
    """The catalogue as a VALUES list: (position, metric, aggregation, unit)."""
    return ", ".join(
        f"({i}, '{m.id}', '{m.default_aggregation.value}', '{m.unit}')" for i, m in enumerate(CATALOGUE)
    )


def list_windows_sql(
    *, target: str | None = None, scope: str | None = None, metric: str | None = None,
    with_unmeasured: bool = True,
) -> str:
    """SQL listing stored windows (filtered), in catalogue order. With ``with_unmeasured``, every
    catalogue metric without a stored window for a listed (target, scope) appears as a
    `not_configured` row with no value and a NULL ``computed_at``."""
    filters = [
        f"{column} = {sql_string(value)}"
        for column, value in (("target_id", target), ("scope", scope), ("metric", metric))
        if value is not None
    ]
    where = f"WHERE {' AND '.join(filters)}" if filters else ""
    columns = ", ".join(WINDOW_COLUMN_NAMES)
    unmeasured = ""
    if with_unmeasured:
        metric_filter = f" AND c.metric = {sql_string(metric)}" if metric is not None else ""
        unmeasured = f"""
  UNION ALL
  SELECT k.target_id, c.metric, k.scope, c.aggregation, NULL, c.unit, 0, '{WindowState.NOT_CONFIGURED.value}',
    {", ".join(["NULL"] * (len(WINDOW_COLUMN_NAMES) - 8))}
  FROM (SELECT DISTINCT target_id, scope FROM stored) k CROSS JOIN cat c
  WHERE NOT EXISTS (SELECT 1 FROM stored s
                    WHERE s.target_id = k.target_id AND s.scope = k.scope AND s.metric = c.metric){metric_filter}"""
    return f"""
WITH stored AS (SELECT {columns} FROM {WINDOWS_TABLE} {where}),
cat(position, metric, aggregation, unit) AS (VALUES {catalogue_values_sql()}),
listed AS (
  SELECT {columns} FROM stored{unmeasured}
)
SELECT {", ".join("l." + c for c in WINDOW_COLUMN_NAMES)}
FROM listed l LEFT JOIN cat USING (metric)
ORDER BY l.target_id, l.scope = '{SCOPE_ALL}' DESC, l.scope, coalesce(cat.position, {len(CATALOGUE)}), l.metric
"""
