"""Readiness: does every metric a profile requires have a live collector, and enough evidence?

Everything here reads through a *query function* (SQL text in, a result with ``columns`` and
``rows`` out) so that it runs the same on an open DuckDB file, through a running collector's SQL
endpoint, or inside the collector itself.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Callable, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from meritlens.analytics._catalogue import METRICS
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._format import format_value, suggestion
from meritlens.analytics._profiles import TaskProfile, text_table
from meritlens.analytics._schema import (
    COVERAGE_COLUMN_NAMES,
    COVERAGE_TABLE,
    SPANS_TABLE,
    WINDOW_COLUMN_NAMES,
    WINDOWS_TABLE,
)
from meritlens.analytics._sql import sql_string
from meritlens.analytics._windows import EVALUATED_SUFFIX, SCOPE_ALL, Window, WindowState


class QueryResultLike(Protocol):
    columns: list[str]
    rows: list[tuple]


QueryFunction = Callable[[str], QueryResultLike]
"""Runs one read-only SQL statement."""


class MetricReadiness(BaseModel):
    """What the stored windows say about one required metric."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    collector: str
    """'span window' (the processor computes it), 'plugin or evaluator' (only they can)."""
    live: bool
    """A finite value exists for the target (in any scope)."""
    state: str
    """State of the window in the checked scope (`not_configured` when none is stored)."""
    aggregation: str
    """The profile's aggregation."""
    window_aggregation: str | None
    value: float | None
    """The window's value in the profile's aggregation, when it can say it."""
    sample_count: int
    min_samples: int
    evidence_uri: str | None
    evidence_digest: str | None


_DERIVED_KEYS = ("missing", "ready", "baseline_ready")


class CoverageReport(BaseModel):
    """The readiness of one target against a profile. ``missing``, ``ready`` and ``baseline_ready``
    are derived from the sets and the shortfalls; no caller can set them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    scope: str = SCOPE_ALL
    required: list[str] = Field(min_length=1)
    covered: list[str]
    checked_at: _dt.datetime
    shortfalls: list[str] = Field(default_factory=list)
    """Every reason the baseline is not ready, one line each ("task_success: 12 of 30 samples")."""
    metrics: list[MetricReadiness] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _refuse_contradictions(cls, data: Any) -> Any:
        """A serialized report may carry its derived fields; they must agree with its sets."""
        if not isinstance(data, dict) or not any(k in data for k in _DERIVED_KEYS):
            return data
        data = dict(data)
        claimed = {k: data.pop(k) for k in _DERIVED_KEYS if k in data}
        derived = cls.model_validate(data)
        for key, value in claimed.items():
            actual = getattr(derived, key)
            if (sorted(value) if key == "missing" else value) != (sorted(actual) if key == "missing" else actual):
                raise ValueError(f"{key}={value!r} contradicts the report's sets (derived {key}={actual!r})")
        return data

    @model_validator(mode="after")
    def _check_sets(self) -> "CoverageReport":
        if len(set(self.required)) != len(self.required):
            raise ValueError("required lists a metric twice")
        stray = [m for m in self.covered if m not in self.required]
        if stray:
            raise ValueError(f"covered metrics {stray} are not required")
        if len(set(self.covered)) != len(self.covered):
            raise ValueError("covered lists a metric twice")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def missing(self) -> list[str]:
        """Required metrics without a live collector, in profile order."""
        return [m for m in self.required if m not in self.covered]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ready(self) -> bool:
        """Coverage is ready when no required metric is missing."""
        return not self.missing

    @computed_field  # type: ignore[prop-decorator]
    @property
    def baseline_ready(self) -> bool:
        """The baseline is ready when coverage is, and no required metric falls short of evidence."""
        return self.ready and not self.shortfalls


def _windows_of(query: QueryFunction, target: str, metrics: Sequence[str]) -> list[Window]:
    metric_list = ", ".join(sql_string(m) for m in metrics)
    result = query(
        f"SELECT {', '.join(WINDOW_COLUMN_NAMES)} FROM {WINDOWS_TABLE} "
        f"WHERE target_id = {sql_string(target)} AND metric IN ({metric_list})"
    )
    return [Window.from_row(row, result.columns) for row in result.rows]


def check_readiness(
    profile: TaskProfile,
    query: QueryFunction,
    *,
    target: str | None = None,
    scope: str = SCOPE_ALL,
    now: _dt.datetime | None = None,
) -> CoverageReport:
    """The coverage report of ``target`` (default: the profile's) against ``profile``.

    A required metric is covered when a window with a finite value exists for the target in any
    scope: its collector exists and has produced a value from the target's spans. The baseline
    additionally needs, in ``scope``, a `measured` window with a finite value, at least the
    profile's minimum samples and an evidence reference; every gap is one shortfall line.
    """
    target = target or profile.target
    required = list(profile.required)
    windows = _windows_of(query, target, required + [m + EVALUATED_SUFFIX for m in required])
    # A metric's window is the processor's; an evaluator's `<metric>.evaluated` window stands in
    # for it when the processor's has no finite value (e.g. task_quality scored by a judge).
    candidates: dict[tuple[str, str], list[Window]] = {}
    for w in windows:
        candidates.setdefault((w.metric.removesuffix(EVALUATED_SUFFIX), w.scope), []).append(w)
    live = {metric for (metric, _), ws in candidates.items() if any(w.finite_value is not None for w in ws)}
    in_scope = {
        metric: min(ws, key=lambda w: (w.finite_value is None, w.metric.endswith(EVALUATED_SUFFIX)))
        for (metric, window_scope), ws in candidates.items() if window_scope == scope
    }
    covered, shortfalls, details = [], [], []
    for metric_id, plan in profile.metrics.items():
        if metric_id in live:
            covered.append(metric_id)
        window = in_scope.get(metric_id)
        if window is not None and window.metric.endswith(EVALUATED_SUFFIX):
            collector = "evaluator"
        else:
            collector = "span window" if metric_id in SPAN_WINDOW_METRICS else "plugin or evaluator"
        gaps: list[str] = []
        if window is None:
            gaps.append(f"no window in scope {scope!r} (not_configured: no {collector} has produced one)")
            value, state = None, WindowState.NOT_CONFIGURED.value
        else:
            state = window.state
            value = window.value_as(plan.aggregation)
            if state != WindowState.MEASURED.value:
                gaps.append(f"state is {state}, not measured")
            if window.finite_value is None:
                gaps.append("no finite value")
            elif value is None:
                gaps.append(
                    f"the window aggregates by {window.aggregation}; the profile's {plan.aggregation.value} "
                    "cannot be read from it"
                )
            if window.sample_count < plan.min_samples:
                gaps.append(f"{window.sample_count} of {plan.min_samples} samples")
            if not window.has_evidence:
                gaps.append("no evidence reference")
        shortfalls += [f"{metric_id}: {gap}" for gap in gaps]
        details.append(MetricReadiness(
            metric=metric_id,
            collector=collector,
            live=metric_id in live,
            state=state,
            aggregation=plan.aggregation.value,
            window_aggregation=window.aggregation if window else None,
            value=value,
            sample_count=window.sample_count if window else 0,
            min_samples=plan.min_samples,
            evidence_uri=window.evidence_uri if window else None,
            evidence_digest=window.evidence_digest if window else None,
        ))
    return CoverageReport(
        target=target,
        scope=scope,
        required=list(profile.required),
        covered=covered,
        checked_at=now or _dt.datetime.now(_dt.timezone.utc),
        shortfalls=shortfalls,
        metrics=details,
    )


class UnknownSubject(ValueError):
    """A readiness check asked about a target, or a scope of it, that no span and no window has."""


def require_known(query: QueryFunction, target: str, scope: str = SCOPE_ALL) -> None:
    """Raise UnknownSubject, naming the targets or scopes there are, unless a span or a window has
    ``target`` (and, for a scope other than `all`, that assessment id). The windows are asked first:
    they are few, and the spans are read only when they do not know the answer."""
    windows = query(f"SELECT DISTINCT target_id, scope FROM {WINDOWS_TABLE}").rows
    target_sql = sql_string(target)
    scopes = {s for t, s in windows if t == target}
    if scopes and (scope == SCOPE_ALL or scope in scopes):
        return
    in_scope = "" if scope == SCOPE_ALL else f" AND assessment_id = {sql_string(scope)}"
    if query(f"SELECT 1 FROM {SPANS_TABLE} WHERE target_id = {target_sql}{in_scope} LIMIT 1").rows:
        return
    if not scopes and not query(f"SELECT 1 FROM {SPANS_TABLE} WHERE target_id = {target_sql} LIMIT 1").rows:
        spans = query(f"SELECT DISTINCT target_id FROM {SPANS_TABLE} WHERE target_id IS NOT NULL").rows
        targets = sorted({t for t, _ in windows} | {t for (t,) in spans})
        raise UnknownSubject(f"unknown target {target!r}: no span or window has it"
                             f"{suggestion(target, targets, 'known targets')}")
    spans = query(f"SELECT DISTINCT assessment_id FROM {SPANS_TABLE} WHERE target_id = {target_sql} "
                  "AND assessment_id IS NOT NULL").rows
    known = sorted(scopes | {s for (s,) in spans} | {SCOPE_ALL})
    raise UnknownSubject(f"unknown scope {scope!r} of target {target!r}: no span or window of the target has it"
                         f"{suggestion(scope, known, 'known scopes')}")


def record_coverage_sql() -> str:
    """Parameterised INSERT of one coverage report into `coverage_checks` (see ``coverage_row``)."""
    placeholders = ", ".join("?" for _ in COVERAGE_COLUMN_NAMES)
    return f"INSERT INTO {COVERAGE_TABLE} ({', '.join(COVERAGE_COLUMN_NAMES)}) VALUES ({placeholders})"


def coverage_row(report: CoverageReport) -> list[Any]:
    """The parameters of ``record_coverage_sql`` for ``report``."""
    row = {
        "target_id": report.target,
        "scope": report.scope,
        "checked_at": report.checked_at,
        "required": report.required,
        "covered": report.covered,
        "shortfalls": report.shortfalls,
        "report": report.model_dump_json(),
    }
    return [row[name] for name in COVERAGE_COLUMN_NAMES]


def judged(report: CoverageReport, baseline: bool) -> tuple[str, bool]:
    """What a check judges (coverage alone, or with ``baseline`` the baseline too) and its verdict."""
    if baseline:
        return "coverage and baseline", report.baseline_ready
    return "coverage", report.ready


def report_json(report: CoverageReport, *, baseline: bool = False) -> str:
    """The report as indented JSON, with what was judged (``judged``) and the verdict (``verdict_ready``)."""
    what, verdict = judged(report, baseline)
    return json.dumps({"judged": what, "verdict_ready": verdict, **report.model_dump(mode="json")}, indent=2)


def _unit(metric: str) -> str | None:
    spec = METRICS.get(metric)
    return spec.unit if spec is not None else None


def _ready(ready: bool) -> str:
    return "READY" if ready else "NOT READY"


def format_report(report: CoverageReport, *, baseline: bool = False) -> str:
    """The report as text: coverage, the baseline and its shortfalls, the verdict on what was judged
    (the baseline only with ``baseline``), then one line per required metric."""
    covered = f"{len(report.covered)} of {len(report.required)} required metrics covered"
    what, verdict = judged(report, baseline)
    lines = [
        f"readiness of {report.target} (scope {report.scope}), checked {report.checked_at.isoformat()}",
        f"coverage: {_ready(report.ready)} ({covered}"
        + (f"; missing: {', '.join(report.missing)})" if report.missing else ")"),
        f"baseline: {_ready(report.baseline_ready)}"
        + ("" if baseline else " (not judged: add --baseline to judge it)"),
    ]
    lines += [f"  - {shortfall}" for shortfall in report.shortfalls]
    lines.append(f"verdict: {_ready(verdict)} ({what} judged)")
    rows = [
        [m.metric, m.collector, "yes" if m.live else "no", m.state,
         "-" if m.value is None else format_value(m.value, _unit(m.metric)), f"{m.sample_count}/{m.min_samples}",
         m.evidence_digest[:12] if m.evidence_digest else "-"]
        for m in report.metrics
    ]
    if rows:
        lines += ["", text_table(["metric", "collector", "live", "state", "value", "samples", "evidence"], rows)]
    return "\n".join(lines)
