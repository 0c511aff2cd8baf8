"""The window definitions: for each metric the processor computes from spans, its sample of a task
(or of a call) as SQL over the task fields (`_tasks`), the facts that decide whether its sources
were observed, and how its value follows from the samples.

A window is the cumulative aggregate of one catalogue metric for one target over one scope
(``all``, or an assessment id). The processor writes only the metrics defined here
(``SPAN_WINDOW_METRICS``); metrics that only an evaluator or plugin can compute are written by them
into the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meritlens.analytics._catalogue import (
    CATALOGUE,
    METRICS,
    REPEATED_RUN_AGGREGATIONS,
    Aggregation,
    MetricSpec,
    SampleUnit,
)
from meritlens.analytics._windows import MIN_SAMPLES_FOR_REPEATED_CLAIM


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


def sample_statistic(metric: str) -> str | None:
    """How a window's value is computed from its samples ``v``: 'aggregate' (the aggregation of the
    samples), 'per_success' (sum of the samples over the successful tasks among them), or None when
    the value is no function of per-sample values (throughput) or no span window exists."""
    definition = DEFINITIONS_BY_METRIC.get(metric)
    if definition is None or definition.value_rule is ValueRule.THROUGHPUT:
        return None
    return definition.value_rule.value
