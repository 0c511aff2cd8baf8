"""Task profiles: which metrics a decision needs, how each is sampled, and how much evidence it needs.

A profile is a TOML file::

    target = "support-bot/answer"

    [metrics.task_success]
    direction = "higher"
    strategy = "representative_task_set"
    cases = 30
    repetitions = 1
    aggregation = "rate"
    min_samples = 30
    tolerance = 0.02          # optional
    constraint = 0.9          # optional, in the metric's unit
    rationale = "one run per support ticket of the frozen set"

    [[alerts]]                # optional: rules the collector evaluates (`_alert_rules`)
    name = "success-floor"
    kind = "constraint"
    metric = "task_success"

Loading checks every rule at once and reports each problem with the metric and field it is about.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from meritlens.analytics._alert_rules import ALERT_KEYS, ProfileAlert, alert_name, check_name, parse_alert
from meritlens.analytics._catalogue import (
    METRICS,
    REPEATED_RUN_AGGREGATIONS,
    Aggregation,
    Direction,
    SampleUnit,
    unknown_metric_message,
)
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._format import format_value, significant, suggestion


class SamplingStrategy(str, Enum):
    """How the runs behind a metric are chosen."""

    SINGLE_RUN = "single_run"
    """One execution of one input."""
    REPEATED_SAME_INPUT = "repeated_same_input"
    """One input run several times: stochastic variance."""
    REPRESENTATIVE_TASK_SET = "representative_task_set"
    """Several representative inputs, once each: general task performance."""
    REPEATED_REPRESENTATIVE_TASK_SET = "repeated_representative_task_set"
    """Several representative inputs, each several times: both."""
    LOAD_TEST = "load_test"
    """Many runs driven concurrently: throughput and latency under load."""


_Count = Annotated[int, Field(strict=True, ge=1)]
_NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
_Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_Text = Annotated[str, Field(strict=True, min_length=1, pattern=r"\S")]


class MetricPlan(BaseModel):
    """The confirmed plan for one required metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    direction: Direction
    strategy: SamplingStrategy
    cases: _Count
    """Representative cases (distinct inputs)."""
    repetitions: _Count
    """Runs per case."""
    aggregation: Aggregation
    min_samples: _Count
    """The quantity of evidence needed (samples in the metric's unit), never a bound on the value."""
    rationale: _Text
    tolerance: _NonNegative | None = None
    """The smallest difference that matters, in the metric's unit."""
    constraint: _Number | None = None
    """A hard threshold on the value, in the metric's unit (a floor when higher is better, else a ceiling)."""

    @property
    def runs(self) -> int:
        """Runs this plan implies: cases x repetitions."""
        return self.cases * self.repetitions


PLAN_FIELDS: tuple[str, ...] = tuple(MetricPlan.model_fields)
_FIELD_ADAPTERS = {
    name: TypeAdapter(Annotated[info.annotation, info]) for name, info in MetricPlan.model_fields.items()
}
PROFILE_KEYS = ("target", "description", "metrics", "alerts")


@dataclass(frozen=True)
class ProfileProblem:
    """One thing wrong with a profile: the metric (None for the profile itself), the field, why."""

    metric: str | None
    field: str
    message: str

    def __str__(self) -> str:
        path = ".".join(p for p in ("metrics" if self.metric else "", self.metric or "", self.field) if p)
        return f"{path}: {self.message}"


class ProfileError(ValueError):
    """A profile that breaks one or more rules; ``problems`` lists every one."""

    def __init__(self, problems: list[ProfileProblem], source: str | None = None):
        self.problems = problems
        self.source = source
        where = f"{source}: " if source else ""
        noun = "problem" if len(problems) == 1 else "problems"
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{where}{len(problems)} {noun} in the profile\n{lines}")


def _suggest(key: str, valid: tuple[str, ...]) -> str:
    return suggestion(key, valid, "valid keys")


def plan_problems(metric_id: str, plan: Mapping[str, Any]) -> list[ProfileProblem]:
    """The rules a plan breaks. ``plan`` holds the fields that are individually valid (typed);
    a rule whose fields are absent is not checked (the absence is reported on its own)."""
    spec = METRICS[metric_id]
    problems: list[ProfileProblem] = []

    def problem(field: str, message: str) -> None:
        problems.append(ProfileProblem(metric_id, field, message))

    direction, strategy, aggregation = plan.get("direction"), plan.get("strategy"), plan.get("aggregation")
    cases, repetitions = plan.get("cases"), plan.get("repetitions")
    runs = cases * repetitions if cases is not None and repetitions is not None else None

    if direction is not None and direction != spec.direction:
        problem("direction", f"{metric_id} is better when {spec.direction.value}; the profile says {direction.value!r}")

    # total_task_cost feeds budget accounting: only a sum of task costs can.
    if aggregation is not None:
        if metric_id == "total_task_cost" and aggregation is not Aggregation.SUM:
            problem("aggregation", f"total_task_cost must use 'sum' (it feeds budget accounting), not {aggregation.value!r}")
        elif aggregation not in spec.allowed_aggregations:
            allowed = ", ".join(a.value for a in spec.allowed_aggregations)
            problem("aggregation", f"{aggregation.value!r} is not an aggregation of {metric_id}; allowed: {allowed}")

    # Distribution and reliability claims need repeated runs.
    claims = []
    if aggregation in REPEATED_RUN_AGGREGATIONS:
        claims.append(f"aggregation {aggregation.value!r}")
    if spec.reliability:
        claims.append(f"{metric_id} (a reliability metric)")
    for claim in claims:
        if strategy is SamplingStrategy.SINGLE_RUN:
            problem("strategy", f"{claim} needs repeated runs and is refused with 'single_run'")
        elif runs is not None and runs < 2:
            problem("repetitions", f"{claim} needs a plan of at least two runs; cases x repetitions = {runs}")

    # The strategy's name says how the runs are laid out.
    if strategy is not None:
        shape = {
            SamplingStrategy.SINGLE_RUN: (cases is None or cases == 1, repetitions is None or repetitions == 1,
                                          "cases = 1 and repetitions = 1"),
            SamplingStrategy.REPEATED_SAME_INPUT: (cases is None or cases == 1,
                                                   repetitions is None or repetitions >= 2,
                                                   "cases = 1 and repetitions >= 2"),
            SamplingStrategy.REPRESENTATIVE_TASK_SET: (cases is None or cases >= 2,
                                                       repetitions is None or repetitions == 1,
                                                       "cases >= 2 and repetitions = 1"),
            SamplingStrategy.REPEATED_REPRESENTATIVE_TASK_SET: (cases is None or cases >= 2,
                                                                repetitions is None or repetitions >= 2,
                                                                "cases >= 2 and repetitions >= 2"),
            SamplingStrategy.LOAD_TEST: (True, runs is None or runs >= 2, "at least two runs"),
        }[strategy]
        cases_ok, repetitions_ok, expected = shape
        if not cases_ok:
            problem("cases", f"strategy {strategy.value!r} means {expected}; cases = {cases}")
        if not repetitions_ok:
            problem("repetitions", f"strategy {strategy.value!r} means {expected}; repetitions = {repetitions}")

    # Ratio metrics live in [0, 1]; every other catalogue quantity is non-negative.
    for field in ("constraint", "tolerance"):
        value = plan.get(field)
        if value is None:
            continue
        if spec.ratio and not 0 <= value <= 1:
            problem(field, f"{metric_id} is a ratio: its {field} must lie in [0, 1], got {value}")
        elif value < 0:
            problem(field, f"{metric_id} is never negative ({spec.unit}): its {field} must be >= 0, got {value}")

    # min_samples is a quantity of evidence: compared with sample counts, never with the value.
    min_samples = plan.get("min_samples")
    if min_samples is not None and runs is not None and spec.sample_unit is SampleUnit.TASK and min_samples > runs:
        problem("min_samples", f"{min_samples} samples needed but the plan's {runs} runs give one task sample each")
    return problems


def _validated_fields(metric_id: str, raw: Mapping[str, Any], problems: list[ProfileProblem]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in raw:
        if key not in _FIELD_ADAPTERS:
            problems.append(ProfileProblem(metric_id, key, f"unknown key{_suggest(key, PLAN_FIELDS)}"))
    for name, info in MetricPlan.model_fields.items():
        if name not in raw:
            if info.is_required():
                problems.append(ProfileProblem(metric_id, name, "missing (required)"))
            continue
        try:
            values[name] = _FIELD_ADAPTERS[name].validate_python(raw[name])
        except ValidationError as exc:
            message = "; ".join(e["msg"] for e in exc.errors())
            problems.append(ProfileProblem(metric_id, name, f"{message} (got {raw[name]!r})"))
    return values


class TaskProfile(BaseModel):
    """A validated task profile: the target and the plan of every required metric."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    target: _Text
    description: str | None = None
    metrics: dict[str, MetricPlan] = Field(min_length=1)
    alerts: tuple[ProfileAlert, ...] = Field(default=(), exclude=True)
    """The alert rules (`[[alerts]]`), validated by `profile_from_dict`."""

    @model_validator(mode="after")
    def _check_rules(self) -> "TaskProfile":
        problems = []
        for metric_id, plan in self.metrics.items():
            if metric_id not in METRICS:
                problems.append(ProfileProblem(metric_id, "", unknown_metric_message(metric_id)))
                continue
            problems += plan_problems(metric_id, dict(plan))
        if problems:
            raise ValueError("; ".join(str(p) for p in problems))
        return self

    @property
    def required(self) -> tuple[str, ...]:
        """The required metric ids, in profile order."""
        return tuple(self.metrics)

    @property
    def designs(self) -> dict[tuple[SamplingStrategy, int, int], tuple[str, ...]]:
        """Metrics grouped by run design (strategy, cases, repetitions); a design's runs serve all its metrics."""
        grouped: dict[tuple[SamplingStrategy, int, int], list[str]] = {}
        for metric_id, plan in self.metrics.items():
            grouped.setdefault((plan.strategy, plan.cases, plan.repetitions), []).append(metric_id)
        return {design: tuple(ids) for design, ids in grouped.items()}

    @property
    def total_runs(self) -> int:
        """Runs the profile implies: the runs of each distinct design, added up."""
        return sum(cases * repetitions for _, cases, repetitions in self.designs)

    def to_dict(self) -> dict[str, Any]:
        """The profile in the shape of its TOML file (JSON-ready)."""
        shaped = self.model_dump(mode="json", exclude_none=True)
        return {**shaped, "alerts": [a.to_dict() for a in self.alerts]} if self.alerts else shaped


def profile_from_dict(data: Any, source: str | None = None) -> TaskProfile:
    """Validate a profile given as a mapping (a parsed TOML file); raise ProfileError with every problem."""
    problems: list[ProfileProblem] = []
    if not isinstance(data, Mapping):
        raise ProfileError([ProfileProblem(None, "profile", "must be a table of keys")], source)
    for key in data:
        if key not in PROFILE_KEYS:
            problems.append(ProfileProblem(None, key, f"unknown key{_suggest(key, PROFILE_KEYS)}"))
    target = data.get("target")
    if not isinstance(target, str) or not target.strip():
        problems.append(ProfileProblem(None, "target", f"must name the target (a non-empty string), got {target!r}"))
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        problems.append(ProfileProblem(None, "description", f"must be a string, got {description!r}"))
    metrics = data.get("metrics")
    plans: dict[str, MetricPlan] = {}
    if not isinstance(metrics, Mapping) or not metrics:
        problems.append(ProfileProblem(None, "metrics", "must hold at least one [metrics.<id>] table"))
        metrics = {}
    for metric_id, raw in metrics.items():
        if metric_id not in METRICS:
            problems.append(ProfileProblem(metric_id, "", unknown_metric_message(metric_id)))
            continue
        if not isinstance(raw, Mapping):
            problems.append(ProfileProblem(metric_id, "", f"must be a table of keys, got {raw!r}"))
            continue
        plan_problems_before = len(problems)
        values = _validated_fields(metric_id, raw, problems)
        problems += plan_problems(metric_id, values)
        if len(problems) == plan_problems_before:
            plans[metric_id] = MetricPlan(**values)
    alerts = _alerts(data.get("alerts", []), plans, problems)
    if problems:
        raise ProfileError(problems, source)
    return TaskProfile(target=target, description=description, metrics=plans, alerts=alerts)


def _alerts(raw: Any, plans: dict[str, MetricPlan], problems: list[ProfileProblem]) -> tuple[ProfileAlert, ...]:
    """The ``[[alerts]]`` entries, each problem named by the rule (its name, or its position)."""
    if not isinstance(raw, list):
        problems.append(ProfileProblem(None, "alerts", f"must be an array of tables ([[alerts]]), got {raw!r}"))
        return ()
    alerts, names = [], set()
    for index, entry in enumerate(raw):
        try:
            check_name(entry, names)
            alerts.append(parse_alert(entry, plans))
        except ValueError as exc:
            key, _, why = str(exc).partition(": ")
            where = f"alerts[{alert_name(entry, index)}]"
            named = key in ALERT_KEYS or isinstance(entry, Mapping) and key in entry
            problems.append(ProfileProblem(None, f"{where}.{key}", why) if named and why
                            else ProfileProblem(None, where, str(exc)))
    return tuple(alerts)


def load_profile(path: str | Path) -> TaskProfile:
    """Read and validate a TOML profile; raise ProfileError listing every problem."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ProfileError([ProfileProblem(None, "file", f"cannot read it: {exc.strerror or exc}")], source) from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError([ProfileProblem(None, "file", f"not valid TOML: {exc}")], source) from None
    return profile_from_dict(data, source)


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """Rows under headers, columns padded to their widest cell."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
             for line in [headers, *rows]]
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else significant(value)


def _alert_row(alert: ProfileAlert) -> list[str]:
    hours = lambda us: f"{us // 3_600_000_000}h"  # noqa: E731
    rule = alert.rule
    if rule is None:
        when = f"no sample for {hours(alert.range_us)}"
    else:
        higher = METRICS[alert.metric].direction is Direction.HIGHER
        if rule.kind.value == "constraint":
            when = f"{rule.statistic} {'<' if higher else '>'} {rule.threshold:g} {METRICS[alert.metric].unit}"
        else:
            when = (f"{rule.statistic} {'below' if higher else 'above'} the {hours(alert.baseline_us)} before"
                    f" by > {rule.tolerance:g}")
    return [alert.name, alert.kind, alert.metric, when, "-" if rule is None else f"{rule.confidence:g}",
            "-" if rule is None else str(rule.min_samples), hours(alert.range_us)]


def format_plan(profile: TaskProfile, windows: Mapping[str, Any] | None = None, source: str | None = None) -> str:
    """The plan a profile implies, as text. ``windows`` (metric -> Window of the target's `all`
    scope), when given, adds each metric's current state and an estimate of the runs' cost."""
    designs = profile.designs
    head = f"{source}: " if source else ""
    lines = [
        f"{head}target {profile.target}: {len(profile.metrics)} metrics, {profile.total_runs} runs "
        f"in {len(designs)} design{'s' if len(designs) != 1 else ''}",
    ]
    for (strategy, cases, repetitions), ids in designs.items():
        lines.append(
            f"  {cases * repetitions} runs: {strategy.value}, {cases} case{'s' if cases != 1 else ''} x "
            f"{repetitions} repetition{'s' if repetitions != 1 else ''} -> {', '.join(ids)}"
        )
    headers = ["metric", "direction", "strategy", "runs", "aggregation", "min samples", "tolerance", "constraint",
               "collector"]
    if windows is not None:
        headers.append("now")
    rows = []
    for metric_id, plan in profile.metrics.items():
        bound = ">=" if plan.direction is Direction.HIGHER else "<="
        row = [
            metric_id, plan.direction.value, plan.strategy.value, str(plan.runs), plan.aggregation.value,
            str(plan.min_samples), _number(plan.tolerance),
            "-" if plan.constraint is None else f"{bound} {plan.constraint:g} {METRICS[metric_id].unit}",
            "span window" if metric_id in SPAN_WINDOW_METRICS else "plugin or evaluator",
        ]
        if windows is not None:
            window = windows.get(metric_id)
            row.append("no window" if window is None else f"{window.state}, {window.sample_count} samples")
        rows.append(row)
    lines += ["", text_table(headers, rows)]
    if profile.alerts:
        lines += ["", text_table(["alert", "kind", "metric", "fires when", "confidence", "min samples", "range"],
                                 [_alert_row(a) for a in profile.alerts])]
    cost = windows.get("total_task_cost") if windows is not None else None
    if cost is not None and cost.mean is not None and cost.count:
        lines.append(
            f"\nestimated application cost: {profile.total_runs} runs x {format_value(cost.mean, 'USD')} mean task "
            f"cost (over {cost.count} measured tasks) = {format_value(profile.total_runs * cost.mean, 'USD')}"
        )
    return "\n".join(lines)
