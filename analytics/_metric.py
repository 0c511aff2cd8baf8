"""The metric plugin contract.

A metric is a `Metric` subclass with a unique ``name`` and one method, ``compute``, that reads the
application spans and recorded outcomes of one target's scope (`ScopeEvidence`) and returns a list
of `Measurement`. A metric that cannot say anything about the scope returns ``[]`` (see
`Metric.not_applicable`): a zero is returned only when zero was observed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import math
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from meritlens.analytics import _content
from meritlens.analytics._catalogue import METRICS, Aggregation
from meritlens.analytics._schema import SPAN_COLUMNS
from meritlens.instrumentation import conventions as c

if TYPE_CHECKING:
    from meritlens.analytics._judge import JudgeSession
    from meritlens.analytics._sidecar import KeyedObservation

log = logging.getLogger("meritlens.analytics.metrics")

STATUS_ERROR = 2
"""OTLP status code of a failed span."""

# --- spans ------------------------------------------------------------------------------------------
_DERIVED_TIME_COLUMNS = ("start_time", "end_time", "received_at")
SCOPE_SPAN_COLUMNS: tuple[str, ...] = tuple(col.name for col in SPAN_COLUMNS if col.name not in _DERIVED_TIME_COLUMNS)
"""The `spans` columns a metric sees; times are carried as ``start_unix_nano``/``end_unix_nano``."""
_JSON_COLUMNS = frozenset(col.name for col in SPAN_COLUMNS if col.sql_type.startswith("JSON"))
_JSON_DEFAULTS = {"attributes": dict, "resource": dict, "events": list, "links": list}


class _SpanRowMethods:
    """Helpers shared by every `SpanRow`."""

    trace_id: str
    span_id: str
    task_id: str | None
    status_code: int | None
    error_type: str | None
    attributes: dict
    events: list
    end_unix_nano: int
    operation: str | None

    @property
    def key(self) -> str:
        """``trace_id:span_id``, the span's identity in evidence digests."""
        return f"{self.trace_id}:{self.span_id}"

    @property
    def task_key(self) -> str:
        """The task this span belongs to: its task id, else its trace."""
        return self.task_id or self.trace_id

    @property
    def end_time(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self.end_unix_nano / 1e9, tz=_dt.UTC)

    @property
    def failed(self) -> bool:
        """The span recorded an error (error status or an ``error.type``)."""
        return self.status_code == STATUS_ERROR or self.error_type is not None

    @property
    def is_tool(self) -> bool:
        return self.operation == c.OP_EXECUTE_TOOL

    def attribute(self, name: str, default: Any = None) -> Any:
        """A span attribute not held in a typed column."""
        return self.attributes.get(name, default)

    @property
    def output_text(self) -> str | None:
        return _content.output_text(self.attributes, self.events)

    @property
    def input_text(self) -> str | None:
        return _content.input_text(self.attributes, self.events)

    @property
    def system_instructions(self) -> str | None:
        return _content.system_instructions(self.attributes, self.events)


SpanRow = dataclasses.make_dataclass(
    "SpanRow",
    [(name, Any) for name in SCOPE_SPAN_COLUMNS],
    bases=(_SpanRowMethods,),
    frozen=True,
    eq=False,
)
SpanRow.__doc__ = (
    "One stored span as a metric sees it: a field per `spans` column (see analytics/_schema.py), with "
    "``attributes``/``resource`` as dicts and ``events``/``links`` as lists."
)
SpanRow.__module__ = __name__


def span_from_row(columns: Iterable[str], row: Iterable[Any]) -> SpanRow:
    """Build a SpanRow from a result row whose columns include every SCOPE_SPAN_COLUMNS name."""
    values = dict(zip(columns, row, strict=True))
    kwargs = {}
    for name in SCOPE_SPAN_COLUMNS:
        value = values.get(name)
        if name in _JSON_COLUMNS:
            if isinstance(value, str):
                value = json.loads(value)
            if value is None:
                value = _JSON_DEFAULTS.get(name, dict)()
        kwargs[name] = value
    return SpanRow(**kwargs)


# --- outcomes ---------------------------------------------------------------------------------------
def _finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def evaluation_scores(span: SpanRow) -> list[tuple[str, float]]:
    """(evaluation name, score) pairs recorded on a span, from its attributes and its events.

    An entry whose score is not a finite number is logged and left out.
    """
    found: list[tuple[str, float]] = []
    sources = [("attributes", span.attributes)]
    sources += [(f"event {e.get('name')!r}", e.get("attributes") or {}) for e in span.events if isinstance(e, dict)]
    for where, attrs in sources:
        if not isinstance(attrs, dict):
            continue
        name = attrs.get(c.GEN_AI_EVALUATION_NAME)
        if name is None or c.GEN_AI_EVALUATION_SCORE_VALUE not in attrs:
            continue
        raw = attrs[c.GEN_AI_EVALUATION_SCORE_VALUE]
        score = _finite_number(raw)
        if score is None or not isinstance(name, str):
            log.warning(
                "span %s (%s): evaluation %r has score %r, not a finite number; ignored",
                span.key, where, name, raw,
            )
            continue
        found.append((name, score))
    return found


@dataclass(frozen=True)
class TaskRecord:
    """One sample: a task's application spans (sharing a task id, else one trace) and its outcomes."""

    key: str
    case_id: str | None
    spans: tuple[SpanRow, ...]
    success: bool | None
    """The recorded outcome (``meritlens.outcome.success``); the latest-ending span that carries it wins."""
    human_intervention: bool | None
    quality_scores: tuple[float, ...]
    """Every ``meritlens.quality.score`` recorded on the task's spans."""
    evaluation_scores: Mapping[str, tuple[float, ...]]
    """``gen_ai.evaluation.score.value`` by ``gen_ai.evaluation.name``, from span attributes and events."""

    @property
    def span_keys(self) -> frozenset[str]:
        return frozenset(s.key for s in self.spans)

    @property
    def llm_spans(self) -> tuple[SpanRow, ...]:
        return tuple(s for s in self.spans if not s.is_tool)

    @property
    def output_text(self) -> str | None:
        """The task's final output: the latest-ending non-tool span that recorded an output."""
        for span in sorted(self.llm_spans, key=lambda s: s.end_unix_nano, reverse=True):
            text = span.output_text
            if text is not None:
                return text
        return None

    @property
    def input_text(self) -> str | None:
        """The task's input: the earliest-starting non-tool span that recorded one."""
        for span in self.llm_spans:
            text = span.input_text
            if text is not None:
                return text
        return None

    @property
    def system_instructions(self) -> str | None:
        for span in self.llm_spans:
            text = span.system_instructions
            if text is not None:
                return text
        return None

    @property
    def hit_error_or_retry(self) -> bool:
        return any(s.failed or (s.retries or 0) > 0 for s in self.spans)

    def scores_named(self, names: Iterable[str]) -> tuple[float, ...]:
        wanted = tuple(names)
        return tuple(v for n in wanted for v in self.evaluation_scores.get(n, ()))


def _latest(spans: Iterable[SpanRow], column: str) -> Any:
    carrying = [s for s in spans if getattr(s, column) is not None]
    if not carrying:
        return None
    return getattr(max(carrying, key=lambda s: s.end_unix_nano), column)


def build_task(key: str, spans: list[SpanRow]) -> TaskRecord:
    spans = sorted(spans, key=lambda s: (s.start_unix_nano, s.span_id))
    scores: dict[str, list[float]] = defaultdict(list)
    for span in spans:
        for name, value in evaluation_scores(span):
            scores[name].append(value)
    case_ids = [s.case_id for s in spans if s.case_id is not None]
    return TaskRecord(
        key=key,
        case_id=case_ids[0] if case_ids else None,
        spans=tuple(spans),
        success=_latest(spans, "outcome_success"),
        human_intervention=_latest(spans, "human_intervention"),
        quality_scores=tuple(float(s.quality_score) for s in spans if s.quality_score is not None),
        evaluation_scores={name: tuple(values) for name, values in scores.items()},
    )


@dataclass(frozen=True)
class ScopeEvidence:
    """The application spans of one target in one scope, and their tasks with recorded outcomes."""

    target_id: str
    scope: str
    spans: tuple[SpanRow, ...]
    tasks: tuple[TaskRecord, ...]

    @classmethod
    def from_spans(cls, target_id: str, scope: str, spans: Iterable[SpanRow]) -> ScopeEvidence:
        """Group spans into tasks; spans of another role are refused rather than silently counted."""
        spans = tuple(spans)
        for span in spans:
            if span.role != c.ROLE_APPLICATION:
                raise ValueError(f"span {span.key} has role {span.role!r}; metrics read application spans only")
        by_task: dict[str, list] = defaultdict(list)
        for span in spans:
            by_task[span.task_key].append(span)
        tasks = tuple(build_task(key, members) for key, members in sorted(by_task.items()))
        return cls(target_id=target_id, scope=scope, spans=spans, tasks=tasks)

    @property
    def label(self) -> str:
        return f"target {self.target_id!r} scope {self.scope!r}"


# --- measurements -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    """One number a metric observed, with the spans it came from.

    ``metric_name`` is the metric's name, or ``<name>.<partition>`` when one metric reports several
    partitions. ``sample_values`` (one per sample, optional) fill the window's distribution summary.
    """

    metric_name: str
    value: float
    unit: str
    summary: str
    sample_count: int
    evidence: frozenset[str]
    """``trace_id:span_id`` of every span that fed the value."""
    per_case: Mapping[str, float] = field(default_factory=dict)
    per_key: Mapping[str, float] = field(default_factory=dict)
    aggregation: Aggregation | None = None
    sample_values: tuple[float, ...] = ()
    first_span_time: _dt.datetime | None = None
    last_span_time: _dt.datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or not math.isfinite(self.value):
            raise ValueError(f"{self.metric_name}: value {self.value!r} is not a finite number")
        if isinstance(self.sample_count, bool) or not isinstance(self.sample_count, int) or self.sample_count < 1:
            raise ValueError(f"{self.metric_name}: sample_count must be a positive integer, got {self.sample_count!r}")
        if not self.evidence:
            raise ValueError(f"{self.metric_name}: a measurement needs the spans it came from (evidence is empty)")
        if not self.summary or "\n" in self.summary:
            raise ValueError(f"{self.metric_name}: summary must be one non-empty line")
        if self.aggregation is not None and not isinstance(self.aggregation, Aggregation):
            object.__setattr__(self, "aggregation", Aggregation(self.aggregation))


def span_times(spans: Iterable[SpanRow]) -> tuple[_dt.datetime | None, _dt.datetime | None]:
    ends = [s.end_unix_nano for s in spans]
    if not ends:
        return None, None
    first, last = (_dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.UTC) for ns in (min(ends), max(ends)))
    return first, last


# --- options ----------------------------------------------------------------------------------------
class OptionError(ValueError):
    """A metric option is missing or invalid; the message names it."""


@dataclass(frozen=True)
class MetricOptions:
    """Per-invocation settings (``--schema``, ``--step-threshold``, ``--option key=value`` ...)."""

    values: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def get_int(self, name: str, default: int, *, minimum: int | None = None) -> int:
        raw = self.values.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise OptionError(f"option {name}={raw!r} is not an integer") from None
        if minimum is not None and value < minimum:
            raise OptionError(f"option {name}={value} must be at least {minimum}")
        return value

    def get_path(self, name: str) -> Path | None:
        raw = self.values.get(name)
        if raw is None:
            return None
        path = Path(raw)
        if not path.is_file():
            raise OptionError(f"option {name}: no file at {raw}")
        return path


# --- the contract -----------------------------------------------------------------------------------
class Metric(ABC):
    """Base class of every metric, built-in or installed through the ``meritlens.metrics`` entry points.

    Subclasses set ``name`` (unique; the key windows and reports are stored under) and implement
    ``compute``. ``unit`` and ``aggregation`` default to the catalogue's entry for ``name``; a
    metric outside the catalogue should set them.
    """

    name: ClassVar[str]
    unit: ClassVar[str | None] = None
    aggregation: ClassVar[Aggregation | None] = None
    not_applicable_reason: str | None = None
    """Set by `not_applicable`; shown in reports."""

    @abstractmethod
    def compute(
        self,
        evidence: ScopeEvidence,
        *,
        run_dir: Path,
        options: MetricOptions,
        judge: JudgeSession | None,
    ) -> list[Measurement]:
        """Measure ``evidence``. ``run_dir`` is where sidecar files go; ``judge`` is set when the
        user configured one (deterministic metrics ignore it). Return ``[]`` when the metric does
        not apply, after logging why with `not_applicable`."""

    def read_keyed_observations(self, run_dir: Path) -> list[KeyedObservation]:
        """The numbers this metric wrote to its sidecar in ``run_dir``, keyed; ``[]`` if it writes none."""
        return []

    # --- helpers for implementations ---
    def not_applicable(self, evidence: ScopeEvidence, reason: str) -> list[Measurement]:
        """Log one INFO line saying why the metric does not apply, and return ``[]``."""
        log.info("%s does not apply to %s: %s", self.name, evidence.label, reason)
        self.not_applicable_reason = reason
        return []

    def declared_unit(self) -> str | None:
        if self.unit is not None:
            return self.unit
        spec = METRICS.get(self.name)
        return spec.unit if spec else None

    def declared_aggregation(self) -> Aggregation | None:
        if self.aggregation is not None:
            return Aggregation(self.aggregation)
        spec = METRICS.get(self.name)
        return spec.default_aggregation if spec else None

    def measurement(
        self,
        *,
        value: float,
        summary: str,
        tasks_or_spans: Iterable[Any],
        sample_count: int,
        per_case: Mapping[str, float] | None = None,
        per_key: Mapping[str, float] | None = None,
        sample_values: Iterable[float] = (),
        metric_name: str | None = None,
    ) -> Measurement:
        """Build a Measurement with this metric's unit and aggregation, its evidence taken from the
        given tasks (`TaskRecord`) or spans."""
        spans: list = []
        for item in tasks_or_spans:
            spans.extend(item.spans if isinstance(item, TaskRecord) else (item,))
        first, last = span_times(spans)
        unit = self.declared_unit()
        if unit is None:
            raise ValueError(f"metric {self.name!r} is not in the catalogue and declares no unit")
        return Measurement(
            metric_name=metric_name or self.name,
            value=float(value),
            unit=unit,
            summary=summary,
            sample_count=sample_count,
            evidence=frozenset(s.key for s in spans),
            per_case=dict(per_case or {}),
            per_key=dict(per_key or {}),
            aggregation=self.declared_aggregation(),
            sample_values=tuple(float(v) for v in sample_values),
            first_span_time=first,
            last_span_time=last,
        )
