"""The window model: one row of the `windows` table, the states a metric can be in, and how stored
windows are listed.

A window is the cumulative aggregate of one catalogue metric for one target over one scope
(``all``, or an assessment id). The processor (``_accumulate``) keeps mergeable state per window
and, for each batch, applies only the samples of the tasks the batch touched (their samples
before the batch are taken out, their samples after it put in); it *replaces* the stored rows,
so a window always equals a computation from scratch over every stored span. How each metric's
window is computed is in ``_definitions`` (over the task fields of ``_tasks``, with the samples of
``_samples``).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from enum import Enum

from meritlens.analytics._catalogue import CATALOGUE, Aggregation
from meritlens.analytics._schema import WINDOW_COLUMN_NAMES, WINDOWS_TABLE
from meritlens.analytics._sql import row_time, sql_string

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
            values[name] = row_time(values.get(name))
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


# --- reading windows --------------------------------------------------------------------------------
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
