"""The metric catalogue: one declarative table, the single source of every metric's facts.

Docs (the table in docs/evidence.md), profile validation, the window processor and readiness
all read this table; nothing else spells a metric's unit, direction or aggregation rules.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import StrEnum


class Direction(StrEnum):
    """Which way is better."""

    HIGHER = "higher"
    LOWER = "lower"


class Aggregation(StrEnum):
    """How the samples of a window are combined into its value."""

    SINGLE_VALUE = "single_value"
    SUM = "sum"
    MEAN = "mean"
    RATE = "rate"
    DISTRIBUTION = "distribution"
    PERCENTILE = "percentile"


class MetricGroup(StrEnum):
    """The catalogue's three groups."""

    QUALITY = "quality_and_behaviour"
    COST = "cost_and_resources"
    LATENCY = "latency_and_operations"


class MetricKind(StrEnum):
    """What sort of quantity a value is."""

    SCORE = "score"
    """A graded judgement in [0, 1] (an evaluator's or the application's score)."""
    PROPORTION = "proportion"
    """The share of samples with some property, in [0, 1]."""
    COUNT = "count"
    """A non-negative number of things (tokens, steps)."""
    COST = "cost"
    """Money, non-negative."""
    DURATION = "duration"
    """Elapsed time in seconds, non-negative."""
    FREQUENCY = "frequency"
    """Things per second, non-negative."""


RATIO_KINDS = frozenset({MetricKind.SCORE, MetricKind.PROPORTION})


class Source(StrEnum):
    """Where a metric's values come from."""

    SPAN_FIELDS = "span_fields"
    """Read from the application's own spans (tokens, cost, latency, retries, steps, tool spans)."""
    OUTCOMES = "outcomes"
    """Outcomes and scores recorded by the application, an evaluator or a person."""
    DERIVED = "derived"
    """Computed from other metrics or from comparing outputs (e.g. across repetitions)."""


class SampleUnit(StrEnum):
    """What one sample of a window is."""

    TASK = "task"
    CALL = "call"


REPEATED_RUN_AGGREGATIONS = frozenset(
    {Aggregation.RATE, Aggregation.MEAN, Aggregation.DISTRIBUTION, Aggregation.PERCENTILE}
)
"""Aggregations that make a distribution claim: a plan for them needs at least two runs."""


@dataclass(frozen=True)
class MetricSpec:
    """Everything the product knows about one catalogue metric."""

    id: str
    description: str
    """What one sample's value is."""
    group: MetricGroup
    kind: MetricKind
    unit: str
    direction: Direction
    reliability: bool
    """A reliability claim: refused with a single run whatever its aggregation."""
    default_aggregation: Aggregation
    allowed_aggregations: tuple[Aggregation, ...]
    sample_unit: SampleUnit
    source: Source

    @property
    def ratio(self) -> bool:
        """Values (and constraints and tolerances) lie in [0, 1]."""
        return self.kind in RATIO_KINDS


_A = Aggregation
_Q, _C, _L = MetricGroup.QUALITY, MetricGroup.COST, MetricGroup.LATENCY
_SC, _PR, _CN, _CO, _DU, _FR = (
    MetricKind.SCORE, MetricKind.PROPORTION, MetricKind.COUNT,
    MetricKind.COST, MetricKind.DURATION, MetricKind.FREQUENCY,
)
_S, _O, _D = Source.SPAN_FIELDS, Source.OUTCOMES, Source.DERIVED
_TASK, _CALL = SampleUnit.TASK, SampleUnit.CALL
_H, _LO = Direction.HIGHER, Direction.LOWER

_SCORE_AGGS = (_A.MEAN, _A.DISTRIBUTION, _A.PERCENTILE, _A.SINGLE_VALUE)
_AMOUNT_AGGS = (_A.SUM, _A.MEAN, _A.DISTRIBUTION, _A.PERCENTILE, _A.SINGLE_VALUE)
_TIME_AGGS = (_A.PERCENTILE, _A.DISTRIBUTION, _A.MEAN, _A.SINGLE_VALUE)


def _m(id, description, group, kind, unit, direction, reliability, default, allowed, sample_unit, source):
    return MetricSpec(id, description, group, kind, unit, direction, reliability, default, tuple(allowed),
                      sample_unit, source)


# id, description, group, kind, unit, direction, reliability, default aggregation, allowed, sample unit, source
CATALOGUE: tuple[MetricSpec, ...] = (
    _m("task_quality", "Quality score of a task's result, from an evaluator or a known outcome.",
       _Q, _SC, "score", _H, False, _A.MEAN, _SCORE_AGGS, _TASK, _O),
    _m("task_success", "1 when the task's recorded outcome is success, 0 when it is failure.",
       _Q, _PR, "ratio", _H, False, _A.RATE, (_A.RATE,), _TASK, _O),
    _m("consistency", "Agreement of outputs across repetitions of the same input.",
       _Q, _SC, "score", _H, True, _A.MEAN, (_A.MEAN, _A.RATE), _TASK, _D),
    _m("instruction_following", "Score for following the task's instructions.",
       _Q, _SC, "score", _H, False, _A.MEAN, _SCORE_AGGS, _TASK, _O),
    _m("tool_use_performance", "1 when a tool execution (a tool span) succeeded, 0 when it failed.",
       _Q, _PR, "ratio", _H, False, _A.RATE, (_A.RATE,), _CALL, _S),
    _m("structured_output_reliability", "1 when an output parses and validates against the task's schema.",
       _Q, _PR, "ratio", _H, True, _A.RATE, (_A.RATE,), _TASK, _O),
    _m("hallucination_rate", "1 when a task's output is judged to contain unsupported claims.",
       _Q, _PR, "ratio", _LO, False, _A.RATE, (_A.RATE, _A.MEAN), _TASK, _O),
    _m("reasoning_efficiency", "Reasoning tokens spent per successful task (all tasks' tokens / successes).",
       _Q, _CN, "tokens", _LO, False, _A.MEAN, (_A.MEAN,), _TASK, _D),
    _m("recovery_ability", "Of the tasks that hit an error or a retry, 1 when the task still succeeded.",
       _Q, _PR, "ratio", _H, True, _A.RATE, (_A.RATE,), _TASK, _D),
    _m("context_handling", "Score for using long or multi-turn context correctly.",
       _Q, _SC, "score", _H, False, _A.MEAN, _SCORE_AGGS, _TASK, _O),
    _m("retrieval_use_quality", "Score for using retrieved material correctly.",
       _Q, _SC, "score", _H, False, _A.MEAN, _SCORE_AGGS, _TASK, _O),
    _m("long_horizon_performance", "Success of tasks longer than a step threshold.",
       _Q, _PR, "ratio", _H, True, _A.RATE, (_A.RATE,), _TASK, _D),
    _m("preference_fit", "Score for matching the users' stated or observed preferences.",
       _Q, _SC, "score", _H, False, _A.MEAN, _SCORE_AGGS, _TASK, _O),
    _m("input_tokens", "Input tokens of a task's application calls (cached tokens included).",
       _C, _CN, "tokens", _LO, False, _A.SUM, _AMOUNT_AGGS, _TASK, _S),
    _m("output_tokens", "Output tokens of a task's application calls (reasoning tokens included).",
       _C, _CN, "tokens", _LO, False, _A.SUM, _AMOUNT_AGGS, _TASK, _S),
    _m("total_task_cost", "Provider cost in USD of a task's application calls; summed for budget accounting.",
       _C, _CO, "USD", _LO, False, _A.SUM, (_A.SUM,), _TASK, _S),
    _m("cost_per_successful_task", "Cost of all tasks with a known outcome divided by the successful ones.",
       _C, _CO, "USD", _LO, False, _A.MEAN, (_A.MEAN,), _TASK, _D),
    _m("agent_steps", "Agent steps a task took.",
       _C, _CN, "steps", _LO, False, _A.MEAN, _AMOUNT_AGGS, _TASK, _S),
    _m("time_to_first_useful_output", "Seconds from a task's start to its first streamed output.",
       _L, _DU, "s", _LO, False, _A.PERCENTILE, _TIME_AGGS, _TASK, _S),
    _m("end_to_end_latency", "Seconds from a task's first span start to its last span end.",
       _L, _DU, "s", _LO, False, _A.PERCENTILE, _TIME_AGGS, _TASK, _S),
    _m("throughput", "Tasks completed per second over the scope's active time (first start to last end).",
       _L, _FR, "tasks/s", _H, True, _A.RATE, (_A.RATE,), _TASK, _S),
    _m("retry_rate", "1 when an application LLM call needed at least one retry.",
       _L, _PR, "ratio", _LO, True, _A.RATE, (_A.RATE,), _CALL, _S),
    _m("human_intervention_rate", "1 when a person had to step in on a task.",
       _L, _PR, "ratio", _LO, False, _A.RATE, (_A.RATE,), _TASK, _O),
)

METRICS: dict[str, MetricSpec] = {spec.id: spec for spec in CATALOGUE}
METRIC_IDS: tuple[str, ...] = tuple(METRICS)


def get_metric(metric_id: str) -> MetricSpec:
    """Return the catalogue entry for ``metric_id``; KeyError names the closest valid id."""
    try:
        return METRICS[metric_id]
    except KeyError:
        raise KeyError(unknown_metric_message(metric_id)) from None


def closest_metric_id(metric_id: str) -> str | None:
    """The catalogue id closest to a mistyped one, if any is close enough."""
    close = difflib.get_close_matches(metric_id, METRIC_IDS, n=1, cutoff=0.5)
    return close[0] if close else None


def unknown_metric_message(metric_id: str) -> str:
    """'unknown metric ...; did you mean ...?' naming the closest valid id."""
    close = closest_metric_id(metric_id)
    hint = f"; did you mean {close!r}?" if close else f"; valid ids: {', '.join(METRIC_IDS)}"
    return f"unknown metric {metric_id!r}{hint}"
