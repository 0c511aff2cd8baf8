"""The metric catalogue: one declarative table, the single source of every metric's facts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Direction(str, Enum):
    HIGHER = "higher"
    LOWER = "lower"


class Aggregation(str, Enum):
    SINGLE_VALUE = "single_value"
    SUM = "sum"
    MEAN = "mean"
    RATE = "rate"
    DISTRIBUTION = "distribution"
    PERCENTILE = "percentile"


class MetricGroup(str, Enum):
    QUALITY = "quality_and_behaviour"
    COST = "cost_and_resources"
    LATENCY = "latency_and_operations"


class Source(str, Enum):
    SPAN_FIELDS = "span_fields"
    """Read from the application's own spans (tokens, cost, latency, retries, steps, tool spans)."""
    OUTCOMES = "outcomes"
    """Outcomes and scores recorded by the application, an evaluator or a person."""
    DERIVED = "derived"
    """Computed from other metrics or from comparing outputs (e.g. across repetitions)."""


class SampleUnit(str, Enum):
    TASK = "task"
    CALL = "call"


# Aggregations that make a distribution or reliability claim: they need repeated runs.
REPEATED_RUN_AGGREGATIONS = frozenset(
    {Aggregation.RATE, Aggregation.MEAN, Aggregation.DISTRIBUTION, Aggregation.PERCENTILE}
)


@dataclass(frozen=True)
class MetricSpec:
    """Everything the product knows about one catalogue metric."""

    id: str
    description: str
    group: MetricGroup
    unit: str
    direction: Direction
    ratio: bool
    """Values (and thresholds) lie in [0, 1]."""
    reliability: bool
    """A reliability claim: refused with a single run."""
    default_aggregation: Aggregation
    allowed_aggregations: tuple[Aggregation, ...]
    sample_unit: SampleUnit
    source: Source


_A = Aggregation
_SCORE_AGGS = (_A.MEAN, _A.DISTRIBUTION, _A.PERCENTILE, _A.SINGLE_VALUE)
_AMOUNT_AGGS = (_A.SUM, _A.MEAN, _A.DISTRIBUTION, _A.PERCENTILE, _A.SINGLE_VALUE)
_TIME_AGGS = (_A.PERCENTILE, _A.DISTRIBUTION, _A.MEAN, _A.SINGLE_VALUE)


def _m(id, description, group, unit, direction, ratio, reliability, default, allowed, unit_of_sample, source):
    return MetricSpec(
        id=id,
        description=description,
        group=group,
        unit=unit,
        direction=Direction(direction),
        ratio=ratio,
        reliability=reliability,
        default_aggregation=default,
        allowed_aggregations=tuple(allowed),
        sample_unit=SampleUnit(unit_of_sample),
        source=source,
    )


_Q, _C, _L = MetricGroup.QUALITY, MetricGroup.COST, MetricGroup.LATENCY
_S, _O, _D = Source.SPAN_FIELDS, Source.OUTCOMES, Source.DERIVED

# id, description, group, unit, direction, ratio, reliability, default agg, allowed aggs, sample unit, source
CATALOGUE: tuple[MetricSpec, ...] = (
    _m("task_quality", "Quality score of a task's result from an evaluator or known outcome (0..1).",
       _Q, "score", "higher", True, False, _A.MEAN, _SCORE_AGGS, "task", _O),
    _m("task_success", "Share of tasks whose recorded outcome is success.",
       _Q, "ratio", "higher", True, False, _A.RATE, (_A.RATE,), "task", _O),
    _m("consistency", "Agreement of outputs across repetitions of the same input.",
       _Q, "ratio", "higher", True, True, _A.MEAN, (_A.MEAN, _A.RATE), "task", _D),
    _m("instruction_following", "Score for following the task's instructions (0..1).",
       _Q, "score", "higher", True, False, _A.MEAN, _SCORE_AGGS, "task", _O),
    _m("tool_use_performance", "Share of tool executions that succeeded, from tool spans (harness traces) only.",
       _Q, "ratio", "higher", True, False, _A.RATE, (_A.RATE,), "call", _S),
    _m("structured_output_reliability", "Share of outputs that parse and validate against the task's schema.",
       _Q, "ratio", "higher", True, True, _A.RATE, (_A.RATE,), "task", _D),
    _m("hallucination_rate", "Share of tasks judged to contain unsupported claims.",
       _Q, "ratio", "lower", True, False, _A.RATE, (_A.RATE, _A.MEAN), "task", _O),
    _m("reasoning_efficiency", "Reasoning tokens spent per successful task.",
       _Q, "tokens", "lower", False, False, _A.MEAN, (_A.MEAN, _A.SINGLE_VALUE), "task", _D),
    _m("recovery_ability", "Share of tasks that hit an error or retry and still succeeded.",
       _Q, "ratio", "higher", True, True, _A.RATE, (_A.RATE,), "task", _D),
    _m("context_handling", "Score for using long or multi-turn context correctly (0..1).",
       _Q, "score", "higher", True, False, _A.MEAN, _SCORE_AGGS, "task", _O),
    _m("retrieval_use_quality", "Score for using retrieved material correctly (0..1).",
       _Q, "score", "higher", True, False, _A.MEAN, _SCORE_AGGS, "task", _O),
    _m("long_horizon_performance", "Success rate of tasks above a step threshold.",
       _Q, "ratio", "higher", True, True, _A.RATE, (_A.RATE,), "task", _D),
    _m("preference_fit", "Score for matching the users' stated or observed preferences (0..1).",
       _Q, "score", "higher", True, False, _A.MEAN, _SCORE_AGGS, "task", _O),
    _m("input_tokens", "Input tokens per task (cached tokens included), application calls only.",
       _C, "tokens", "lower", False, False, _A.SUM, _AMOUNT_AGGS, "task", _S),
    _m("output_tokens", "Output tokens per task (reasoning tokens included), application calls only.",
       _C, "tokens", "lower", False, False, _A.SUM, _AMOUNT_AGGS, "task", _S),
    _m("total_task_cost", "Provider cost in USD of the application's calls; summed for budget accounting.",
       _C, "USD", "lower", False, False, _A.SUM, (_A.SUM,), "task", _S),
    _m("cost_per_successful_task", "Total cost divided by the number of successful tasks.",
       _C, "USD", "lower", False, False, _A.MEAN, (_A.MEAN,), "task", _D),
    _m("agent_steps", "Agent steps per task.",
       _C, "steps", "lower", False, False, _A.MEAN, _AMOUNT_AGGS, "task", _S),
    _m("time_to_first_useful_output", "Seconds from a task's start to its first streamed output.",
       _L, "s", "lower", False, False, _A.PERCENTILE, _TIME_AGGS, "task", _S),
    _m("end_to_end_latency", "Seconds from a task's first span start to its last span end.",
       _L, "s", "lower", False, False, _A.PERCENTILE, _TIME_AGGS, "task", _S),
    _m("throughput", "Completed tasks per second over the scope's active time.",
       _L, "tasks/s", "higher", False, False, _A.RATE, (_A.RATE,), "task", _S),
    _m("retry_rate", "Share of application LLM calls that needed at least one retry.",
       _L, "ratio", "lower", True, True, _A.RATE, (_A.RATE,), "call", _S),
    _m("human_intervention_rate", "Share of tasks where a person had to step in.",
       _L, "ratio", "lower", True, False, _A.RATE, (_A.RATE,), "task", _O),
)

METRICS: dict[str, MetricSpec] = {spec.id: spec for spec in CATALOGUE}
METRIC_IDS: tuple[str, ...] = tuple(METRICS)


def get_metric(metric_id: str) -> MetricSpec:
    """Return the catalogue entry for ``metric_id``; KeyError names the closest valid id."""
    try:
        return METRICS[metric_id]
    except KeyError:
        raise KeyError(unknown_metric_message(metric_id)) from None


def unknown_metric_message(metric_id: str) -> str:
    import difflib

    close = difflib.get_close_matches(metric_id, METRIC_IDS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown metric {metric_id!r}{hint}"
