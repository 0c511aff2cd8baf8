"""Running metrics over one target's scope and turning their measurements into windows.

`evaluate` reads the scope's application spans through an `EvaluationStore` (the DuckDB file, or
a running collector), runs each metric, stores one window per measurement (or a
``not_applicable`` window when a metric returns ``[]``), records the judge's calls as
orchestration spans, and merges the results into ``evaluation.json`` in the run directory.

A metric that raises, or returns a measurement that breaks the catalogue's rules, is recorded
as failed (traceback logged); its earlier window is left as it was and the other metrics still
run. Windows are replaced per (target, metric, scope) key, so a re-run replaces the entries of
the metrics it ran and keeps the rest.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import statistics
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, Protocol
from urllib.parse import quote

from meritlens.analytics._catalogue import METRICS, REPEATED_RUN_AGGREGATIONS, Aggregation
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._evidence import evidence_uri, span_keys_digest
from meritlens.analytics._judge import DEFAULT_REPLICAS, Judge, JudgeCall, JudgeSession, is_fake_model
from meritlens.analytics._metric import (
    SCOPE_SPAN_COLUMNS,
    Measurement,
    Metric,
    MetricOptions,
    OptionError,
    ScopeEvidence,
    span_from_row,
)
from meritlens.analytics._schema import SPANS_TABLE
from meritlens.analytics._sidecar import sidecar_path
from meritlens.analytics._sql import sql_string
from meritlens.analytics._tasks import APPLICATION_SPANS
from meritlens.analytics._windows import (
    EVALUATED_SUFFIX,
    EVIDENCE_MEDIA_TYPE,
    MIN_SAMPLES_FOR_REPEATED_CLAIM,
    SCOPE_ALL,
    Window,
    WindowState,
)

log = logging.getLogger("meritlens.analytics.evaluate")

REPORT_FILENAME = "evaluation.json"
DEFAULT_RUNS_DIR = "meritlens-runs"
PARTITION_SEPARATOR = "."
PROCESSOR_OWNED_METRICS = frozenset(SPAN_WINDOW_METRICS)
"""Metrics whose bare-name window the collector's processor recomputes from spans on every batch."""


def window_metric_name(measurement_name: str) -> str:
    """The `windows.metric` an evaluated measurement is stored under.

    The processor owns the bare-name windows of the span-window metrics and replaces them whenever
    spans arrive; an evaluation never overwrites them (nor would its window survive). Its result for
    such a metric is stored beside it as ``<name>.evaluated``.
    """
    if measurement_name in PROCESSOR_OWNED_METRICS:
        return measurement_name + EVALUATED_SUFFIX
    return measurement_name


class EvaluationError(RuntimeError):
    """The evaluation could not start (no spans, bad options); nothing was written."""


@dataclass(frozen=True)
class QueryPage:
    columns: list[str]
    rows: list[tuple]
    truncated: bool = False
    """The store cut the result at its own row limit."""


class EvaluationStore(Protocol):
    """Where an evaluation reads spans and writes its results: the DuckDB file or a running collector."""

    db_name: str

    def query(self, sql: str) -> QueryPage:
        """Run one read-only statement."""

    def write_windows(self, windows: list[Window]) -> None:
        """Insert or replace the windows by (target_id, metric, scope)."""

    def record_judge_calls(self, calls: list[JudgeCall]) -> None:
        """Store the judge's calls as orchestration spans."""


SpanPosition = tuple[int, str, str]
"""(start_unix_nano, trace_id, span_id): the order spans are read in, for keyset paging."""
PAGE_SIZE = 5000


def scope_spans_sql(target_id: str, scope: str, *, after: SpanPosition | None = None, limit: int | None = None) -> str:
    """The read-only query for the application spans of one target's scope, in a stable order,
    optionally only those after ``after`` and at most ``limit`` of them."""
    where = [APPLICATION_SPANS, f"target_id = {sql_string(target_id)}"]
    if scope != SCOPE_ALL:
        where.append(f"assessment_id = {sql_string(scope)}")
    if after is not None:
        start, trace, span = after
        where.append(
            f"(start_unix_nano > {int(start)} OR (start_unix_nano = {int(start)} AND (trace_id > {sql_string(trace)}"
            f" OR (trace_id = {sql_string(trace)} AND span_id > {sql_string(span)}))))"
        )
    sql = (
        f"SELECT {', '.join(SCOPE_SPAN_COLUMNS)} FROM {SPANS_TABLE} WHERE {' AND '.join(where)}"
        " ORDER BY start_unix_nano, trace_id, span_id"
    )
    return sql + (f" LIMIT {int(limit)}" if limit is not None else "")


def default_run_dir(target_id: str, scope: str, base: str | os.PathLike = DEFAULT_RUNS_DIR) -> Path:
    """``./meritlens-runs/<target>/<scope>/`` with each part percent-encoded (a target id may hold '/')."""
    return Path(base) / quote(target_id, safe="") / quote(scope, safe="")


# --- windows from measurements ----------------------------------------------------------------------
def evidence_digest(span_keys: Iterable[str]) -> str:
    """The evidence digest of the spans a measurement rests on (the windows' rule, `span_keys_digest`)."""
    return span_keys_digest(span_keys)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (DuckDB's quantile_cont)."""
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = math.ceil(position)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def _min_samples(metric_name: str, aggregation: Aggregation) -> int:
    spec = METRICS.get(metric_name)
    repeated = aggregation in REPEATED_RUN_AGGREGATIONS or (spec is not None and spec.reliability)
    return MIN_SAMPLES_FOR_REPEATED_CLAIM if repeated else 1


def base_metric(metric_name: str) -> str:
    return metric_name.split(PARTITION_SEPARATOR, 1)[0]


def measured_window(
    measurement: Measurement, *, target_id: str, scope: str, db_name: str, default_aggregation: Aggregation | None,
    sidecar: Path | None, judge_model: str | None, computed_at: _dt.datetime,
) -> Window:
    aggregation = measurement.aggregation or default_aggregation or Aggregation.MEAN
    values = sorted(measurement.sample_values)
    enough = measurement.sample_count >= _min_samples(base_metric(measurement.metric_name), aggregation)
    summary = dict(count=None, mean=None, min=None, max=None, p50=None, p90=None, p95=None, p99=None)
    if values:
        summary = dict(
            count=len(values), mean=sum(values) / len(values), min=values[0], max=values[-1],
            p50=_quantile(values, 0.5), p90=_quantile(values, 0.9), p95=_quantile(values, 0.95), p99=_quantile(values, 0.99),
            stddev=statistics.stdev(values) if len(values) > 1 else None, quantile_error=0.0,
        )
    return Window(
        target_id=target_id,
        metric=window_metric_name(measurement.metric_name),
        scope=scope,
        aggregation=aggregation.value,
        value=float(measurement.value),
        unit=measurement.unit,
        sample_count=measurement.sample_count,
        state=(WindowState.MEASURED if enough else WindowState.INSUFFICIENT_EVIDENCE).value,
        **summary,
        first_span_time=measurement.first_span_time,
        last_span_time=measurement.last_span_time,
        evidence_uri=evidence_uri(db_name, target_id, scope, window_metric_name(measurement.metric_name),
                                  sidecar=sidecar, judge_model=judge_model),
        evidence_media_type=EVIDENCE_MEDIA_TYPE,
        evidence_digest=evidence_digest(measurement.evidence),
        computed_at=computed_at,
    )


def not_applicable_window(metric: Metric, *, target_id: str, scope: str, computed_at: _dt.datetime) -> Window:
    aggregation = metric.declared_aggregation() or Aggregation.SINGLE_VALUE
    return Window(
        target_id=target_id, metric=window_metric_name(metric.name), scope=scope, aggregation=aggregation.value,
        value=None,
        unit=metric.declared_unit() or "", sample_count=0, state=WindowState.NOT_APPLICABLE.value,
        count=None, mean=None, min=None, max=None, p50=None, p90=None, p95=None, p99=None,
        first_span_time=None, last_span_time=None, evidence_uri=None, evidence_media_type=None,
        evidence_digest=None, computed_at=computed_at,
    )


def check_measurement(metric: Metric, measurement: Measurement, scope_span_keys: frozenset[str]) -> None:
    """Refuse a measurement that breaks the contract or the catalogue; ValueError says how."""
    if not isinstance(measurement, Measurement):
        raise ValueError(f"{metric.name} returned {type(measurement).__name__}, not a Measurement")
    name = measurement.metric_name
    if name != metric.name and not name.startswith(metric.name + PARTITION_SEPARATOR):
        raise ValueError(f"{metric.name} returned a measurement named {name!r}; use "
                         f"{metric.name!r} or '{metric.name}{PARTITION_SEPARATOR}<partition>'")
    outside = measurement.evidence - scope_span_keys
    if outside:
        raise ValueError(f"{name}: evidence names {len(outside)} spans outside the scope, e.g. {sorted(outside)[0]}")
    spec = METRICS.get(metric.name)
    if spec is not None:
        if measurement.unit != spec.unit:
            raise ValueError(f"{name}: unit {measurement.unit!r} differs from the catalogue's {spec.unit!r}")
        if measurement.aggregation is not None and measurement.aggregation not in spec.allowed_aggregations:
            raise ValueError(f"{name}: aggregation {measurement.aggregation.value!r} is not allowed for {spec.id}")
        if spec.ratio and not 0.0 <= measurement.value <= 1.0:
            raise ValueError(f"{name}: value {measurement.value} of a ratio metric is outside [0, 1]")


# --- the run ----------------------------------------------------------------------------------------
Status = Literal["measured", "not_applicable", "failed"]


@dataclass
class MetricOutcome:
    """What happened to one requested metric."""

    metric: str
    status: Status
    measurements: list[Measurement] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    error: str | None = None
    judge_model: str | None = None
    sidecar: Path | None = None
    reason: str | None = None
    """Why the metric did not apply, when it said so."""


@dataclass
class EvaluationResult:
    target_id: str
    scope: str
    run_dir: Path
    span_count: int
    task_count: int
    outcomes: list[MetricOutcome]
    judge_calls: int = 0

    @property
    def failed(self) -> list[MetricOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def windows(self) -> list[Window]:
        return [w for o in self.outcomes for w in o.windows]


def load_evidence(store: EvaluationStore, target_id: str, scope: str, *, page_size: int = PAGE_SIZE) -> ScopeEvidence:
    """Read the scope's application spans page by page (a collector caps the rows of one answer)."""
    spans = []
    after: SpanPosition | None = None
    while True:
        page = store.query(scope_spans_sql(target_id, scope, after=after, limit=page_size))
        spans.extend(span_from_row(page.columns, row) for row in page.rows)
        if not page.rows or (len(page.rows) < page_size and not page.truncated):
            break
        if page.truncated:
            page_size = len(page.rows)
        last = spans[-1]
        after = (last.start_unix_nano, last.trace_id, last.span_id)
    return ScopeEvidence.from_spans(target_id, scope, spans)


def evaluate(
    store: EvaluationStore,
    *,
    target_id: str,
    scope: str,
    metrics: list[type[Metric]],
    run_dir: Path,
    options: MetricOptions | None = None,
    judge: Judge | None = None,
    judge_replicas: int = DEFAULT_REPLICAS,
) -> EvaluationResult:
    """Run ``metrics`` on the target's scope, store their windows and merge the run report."""
    options = options or MetricOptions()
    if not target_id:
        raise EvaluationError("--target is required")
    evidence = load_evidence(store, target_id, scope)
    if not evidence.spans:
        raise EvaluationError(f"no application spans for target {target_id!r} in scope {scope!r}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    session = JudgeSession(judge, target_id=target_id, scope=scope, replicas=judge_replicas) if judge else None
    scope_keys = frozenset(s.key for s in evidence.spans)
    outcomes = []
    for metric_class in metrics:
        outcomes.append(_run_one(metric_class, evidence, run_dir, options, session, store.db_name, scope_keys))
    windows = [w for o in outcomes for w in o.windows]
    if session is not None and session.calls:
        store.record_judge_calls(session.calls)
    if windows:
        store.write_windows(windows)
    result = EvaluationResult(
        target_id=target_id, scope=scope, run_dir=run_dir, span_count=len(evidence.spans),
        task_count=len(evidence.tasks), outcomes=outcomes, judge_calls=len(session.calls) if session else 0,
    )
    merge_report(run_dir, result)
    return result


def _run_one(metric_class: type[Metric], evidence: ScopeEvidence, run_dir: Path, options: MetricOptions,
             session: JudgeSession | None, db_name: str, scope_keys: frozenset[str]) -> MetricOutcome:
    name = getattr(metric_class, "name", metric_class.__name__)
    calls_before = len(session.calls) if session else 0
    computed_at = _dt.datetime.now(_dt.timezone.utc)
    sidecar = sidecar_path(run_dir, name)
    sidecar_before = _file_version(sidecar)
    try:
        metric = metric_class()
        measurements = metric.compute(evidence, run_dir=run_dir, options=options, judge=session)
        if not isinstance(measurements, list):
            raise TypeError(f"{name}.compute returned {type(measurements).__name__}, not a list")
        for measurement in measurements:
            check_measurement(metric, measurement, scope_keys)
        names = [m.metric_name for m in measurements]
        if len(set(names)) < len(names):
            raise ValueError(f"{name} returned two measurements with one name: {names}")
    except OptionError as exc:
        log.error("metric %s failed: %s", name, exc)
        return MetricOutcome(name, "failed", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one metric's failure must not stop the others
        log.error("metric %s failed:\n%s", name, traceback.format_exc())
        return MetricOutcome(name, "failed", error=f"{type(exc).__name__}: {exc}")
    judge_model = session.model if session and len(session.calls) > calls_before else None
    # Only a sidecar this run wrote is evidence of this run.
    sidecar = sidecar.resolve() if _file_version(sidecar) not in (None, sidecar_before) else None
    if not measurements:
        window = not_applicable_window(metric, target_id=evidence.target_id, scope=evidence.scope, computed_at=computed_at)
        return MetricOutcome(name, "not_applicable", windows=[window], sidecar=sidecar,
                             reason=metric.not_applicable_reason)
    windows = [
        measured_window(
            m, target_id=evidence.target_id, scope=evidence.scope, db_name=db_name,
            default_aggregation=metric.declared_aggregation(), sidecar=sidecar, judge_model=judge_model,
            computed_at=computed_at,
        )
        for m in measurements
    ]
    return MetricOutcome(name, "measured", measurements=measurements, windows=windows,
                         judge_model=judge_model, sidecar=sidecar)


def _file_version(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
        return stat.st_ino, stat.st_mtime_ns
    except OSError:
        return None


# --- the run report ---------------------------------------------------------------------------------
def _measurement_json(m: Measurement) -> dict:
    return {
        "metric": m.metric_name, "value": m.value, "unit": m.unit, "summary": m.summary,
        "sample_count": m.sample_count, "aggregation": m.aggregation.value if m.aggregation else None,
        "per_case": dict(m.per_case), "per_key": dict(m.per_key),
        "evidence_digest": evidence_digest(m.evidence), "evidence_spans": len(m.evidence),
    }


def read_report(run_dir: Path) -> dict:
    """The run directory's evaluation report, or an empty one."""
    path = Path(run_dir) / REPORT_FILENAME
    try:
        with path.open(encoding="utf-8") as fh:
            report = json.load(fh)
    except FileNotFoundError:
        return {"metrics": {}}
    except ValueError as exc:
        keep = path.with_suffix(f".corrupt-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%S}.json")
        os.replace(path, keep)
        log.warning("%s is not valid JSON (%s); moved it to %s and started a new report", path, exc, keep)
        return {"metrics": {}}
    if not isinstance(report, dict) or not isinstance(report.get("metrics"), dict):
        raise EvaluationError(f"{path} is not an evaluation report (no 'metrics' object)")
    return report


def merge_report(run_dir: Path, result: EvaluationResult) -> Path:
    """Replace the report entries of the metrics this run ran; keep the others."""
    report = read_report(run_dir)
    report["target_id"] = result.target_id
    report["scope"] = result.scope
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    for outcome in result.outcomes:
        earlier = report["metrics"].get(outcome.metric) or {}
        if outcome.judge_model and earlier.get("judge_model") not in (None, outcome.judge_model):
            log.warning(
                "%s: judged by %s now and by %s before; the two results are not comparable",
                outcome.metric, outcome.judge_model, earlier.get("judge_model"),
            )
        report["metrics"][outcome.metric] = {
            "status": outcome.status,
            "evaluated_at": now,
            "spans": result.span_count,
            "tasks": result.task_count,
            "measurements": [_measurement_json(m) for m in outcome.measurements],
            "error": outcome.error,
            "reason": outcome.reason,
            "judge_model": outcome.judge_model,
            "judge_fake": is_fake_model(outcome.judge_model) if outcome.judge_model else None,
            "sidecar": str(outcome.sidecar) if outcome.sidecar else None,
        }
    path = Path(run_dir) / REPORT_FILENAME
    fd, tmp = tempfile.mkstemp(prefix=".evaluation.", suffix=".tmp", dir=run_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
    return path
