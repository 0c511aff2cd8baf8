"""`GET /metrics`: the windows and the collector's health in the Prometheus exposition format.

Each measured window is a gauge named after its unit (``meritlens_window_seconds``,
``meritlens_window_usd``, ...) labelled by target, metric, scope and aggregation; a window that
holds no value is not exported as a number (missing is never zero), and
``meritlens_window_measured`` says which windows are measured. With task profiles loaded,
``meritlens_profile_metric_covered`` and ``meritlens_profile_metric_within_constraint`` carry the
readiness the alert rules in docs/prometheus.md watch, ``meritlens_alert_firing`` the state of
the profiles' own alert rules (docs/alerts.md), and ``meritlens_regression_*`` the regressions the
dashboard shows (the recent day against the week before). Everything is read at scrape time through
the store's read-only query; the route sits behind the same bearer token as the other endpoints.
"""

from __future__ import annotations

import asyncio
import math

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from meritlens.analytics.engine import METRICS, WINDOWS_TABLE, Change, Direction
from meritlens.collector.serve._health import Health

METRICS_PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format every Prometheus server reads (generate_latest writes it for names like ours)."""

UNIT_NAMES: dict[str, str] = {
    "s": "seconds", "USD": "usd", "tokens": "tokens", "ratio": "ratio", "score": "score", "steps": "steps",
    "tasks/s": "tasks_per_second",
}
"""Catalogue unit -> the Prometheus name suffix of its windows' gauge."""

_WINDOW_LABELS = ["target", "metric", "scope", "aggregation"]
_WINDOWS_SQL = (f"SELECT target_id, metric, scope, aggregation, unit, value, sample_count, state "
                f"FROM {WINDOWS_TABLE} ORDER BY target_id, metric, scope")


def unit_name(unit: str) -> str:
    return UNIT_NAMES.get(unit) or "".join(ch if ch.isalnum() else "_" for ch in unit.lower())


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


class WindowCollector:
    """A prometheus_client collector reading the store at each scrape."""

    def __init__(self, store, health: Health, readiness=None, window_lag=lambda: (0, 0), limiter=None, alerts=None,
                 regressions=None, redactor=None, memory_parts=dict):
        self._store = store
        self._memory_parts = memory_parts
        """Part name -> bytes now (`SpanStore.memory_parts` and the window processor's)."""
        self._alerts = alerts
        self._redactor = redactor
        self._health = health
        self._readiness = readiness
        self._window_lag = window_lag
        """(batches, rows) committed that the windows do not include yet (the window processor's)."""
        self._limiter = limiter
        self._regressions = regressions
        """The current regressions report (collector/serve/_regressions.py); None without windows by time."""
        self._duplicates = 0
        self._inserted_at_start = store.inserted
        """Spans the store took up from its staging log at start: stored by an earlier run."""

    def describe(self):
        return []  # the families depend on the stored windows; nothing to check at registration

    def collect(self):
        yield from self._windows()
        yield from self._store_health()
        if self._limiter is not None:
            yield from self._memory()
        if self._readiness is not None:
            yield from self._profiles()
        if self._alerts is not None:
            yield from self._alert_states()
        if self._regressions is not None:
            yield from self._regression_families(self._regressions())
        if self._redactor is not None:
            yield from self._redactions()

    def _redactions(self):
        counts = self._redactor.counts()
        family = CounterMetricFamily(
            "meritlens_redactions", "Values the redaction policy changed before storing them, by rule and action: "
            "masked and hashed count matches replaced and values hashed whole, dropped attributes removed.",
            labels=["rule", "action"])
        for rule, action in self._redactor.policy.rule_names:  # every rule from the start, so a rate() sees it
            family.add_metric([rule, action], counts.get((rule, action), 0))
        yield family

    def _alert_states(self):
        labels = ["rule", "target", "metric"]
        firing = GaugeMetricFamily("meritlens_alert_firing", "1 while the alert rule fires for the target (the "
                                   "evidence put the metric on the wrong side, or no data), else 0.", labels=labels)
        silenced = GaugeMetricFamily("meritlens_alert_silenced", "1 while the alert rule is silenced for the target "
                                     "(`meritlens alerts silence`), else 0.", labels=labels)
        for state in self._alerts.states():
            key = [state["rule"], state["target"], state["metric"]]
            firing.add_metric(key, 1 if state["firing"] else 0)
            silenced.add_metric(key, 1 if state["silenced_until"] else 0)
        yield firing
        yield silenced

    def _windows(self):
        rows = self._store.query(_WINDOWS_SQL).rows
        values: dict[str, GaugeMetricFamily] = {}
        samples = GaugeMetricFamily("meritlens_window_samples", "Samples that fed the window.", labels=_WINDOW_LABELS)
        measured = GaugeMetricFamily("meritlens_window_measured",
                                     "1 when the window is measured (a finite value with enough evidence), else 0.",
                                     labels=_WINDOW_LABELS)
        for target, metric, scope, aggregation, unit, value, sample_count, state in rows:
            labels = [target, metric, scope, aggregation]
            samples.add_metric(labels, sample_count)
            measured.add_metric(labels, 1 if state == "measured" else 0)
            if state != "measured" or not _finite(value):
                continue
            name = f"meritlens_window_{unit_name(unit)}"
            if name not in values:
                values[name] = GaugeMetricFamily(
                    name, f"Value of each measured window whose unit is {unit}.", labels=_WINDOW_LABELS)
            values[name].add_metric(labels, value)
        yield from values.values()
        yield samples
        yield measured

    def _store_health(self):
        # Read in this order so that a move of staged rows between the reads makes the duplicates
        # look smaller, never larger; the counter only grows.
        accepted = self._health.accepted_total()
        staged = self._store.staged_rows()
        stored, moved = self._store.inserted - self._inserted_at_start, self._store.moved
        self._duplicates = max(self._duplicates, int(accepted) - staged - stored)
        yield CounterMetricFamily("meritlens_spans_stored", "Spans this collector stored in the span table.",
                                  value=stored)
        yield CounterMetricFamily("meritlens_spans_moved", "Spans this collector moved out of the span table past "
                                  "the retention horizon (to the archive, or dropped with --archive none).",
                                  value=moved)
        yield CounterMetricFamily("meritlens_spans_duplicates_dropped",
                                  "Acknowledged spans that were already stored (a retried export), not stored again.",
                                  value=self._duplicates)
        yield GaugeMetricFamily("meritlens_staging_rows", "Span rows durable in the staging log, not yet in the "
                                "span table.", value=staged)
        batches, rows = self._window_lag()
        yield GaugeMetricFamily("meritlens_window_lag_rows", "Stored span rows the windows do not include yet.",
                                value=rows)

    def _memory(self):
        config, usage = self._limiter.config, self._limiter.usage
        if usage is not None:  # not reported by this system: no sample rather than a zero
            yield GaugeMetricFamily("meritlens_memory_anonymous_bytes", "The process's anonymous resident memory "
                                    "at the memory limiter's last check.", value=usage)
        yield GaugeMetricFamily("meritlens_memory_limit_bytes", "--memory-limit.", value=config.limit)
        yield GaugeMetricFamily("meritlens_memory_soft_limit_bytes", "Anonymous memory above which exports are "
                                "refused (meritlens_exports_overloaded_total{reason=\"memory_limit\"}).",
                                value=config.soft_limit)
        yield GaugeMetricFamily("meritlens_memory_refusing_exports", "1 while exports are refused for memory, else 0.",
                                value=1 if self._limiter.limited else 0)
        parts = GaugeMetricFamily(
            "meritlens_memory_part_bytes", "Bytes of each bounded part of the memory budget now (duckdb: DuckDB's own "
            "count; window_state: the window processor's estimate of its state; key_locator, seen_keys: their "
            "arrays); the rest of the anonymous memory is the interpreter, libraries, requests in flight and the "
            "allocators' slack.", labels=["part"])
        for part, used in self._memory_parts().items():
            parts.add_metric([part], used)
        yield parts

    def _profiles(self):
        covered = GaugeMetricFamily(
            "meritlens_profile_metric_covered",
            "1 when a required metric of the profile has a live collector (a finite window value), else 0.",
            labels=["profile", "target", "metric"])
        within = GaugeMetricFamily(
            "meritlens_profile_metric_within_constraint",
            "1 when the window's value (in the profile's aggregation) meets the profile's constraint, 0 when "
            "it does not; absent without a constraint or a value.", labels=["profile", "target", "metric"])
        ready = GaugeMetricFamily("meritlens_profile_ready", "1 when the target's baseline is ready for the profile.",
                                  labels=["profile", "target"])
        constraints = {(name, p.target): p for name, p in getattr(self._readiness, "profiles", [])}
        for target in self._readiness.targets:
            for report in self._readiness(target)["reports"]:
                name = report["profile"]
                ready.add_metric([name, target], 1 if report["baseline_ready"] else 0)
                plans = constraints[(name, target)].metrics if (name, target) in constraints else {}
                for detail in report["metrics"]:
                    metric = detail["metric"]
                    covered.add_metric([name, target, metric], 1 if detail["live"] else 0)
                    plan = plans.get(metric)
                    if plan is None or plan.constraint is None or not _finite(detail["value"]):
                        continue
                    higher = METRICS[metric].direction is Direction.HIGHER
                    ok = detail["value"] >= plan.constraint if higher else detail["value"] <= plan.constraint
                    within.add_metric([name, target, metric], 1 if ok else 0)
        yield covered
        yield within
        yield ready

    @staticmethod
    def _regression_families(report: dict):
        labels = ["target", "metric", "statistic"]
        verdicts = GaugeMetricFamily(
            "meritlens_regression_verdict", "1 for the verdict of each metric's regression (the recent day against "
            "the week before; intervals Bonferroni-adjusted over the report), 0 for the other verdicts.",
            labels=[*labels, "verdict"])
        changes: dict[str, GaugeMetricFamily] = {}
        for r in report["regressions"]:
            common = [r["target"], r["metric"], r["statistic"]]
            for verdict in (c.value for c in Change if c is not Change.UNSUPPORTED):  # a report has no unsupported
                verdicts.add_metric([*common, verdict], 1 if r["verdict"] == verdict else 0)
            if r["difference"] is None:
                continue  # no interval: no change is exported (missing is never zero)
            name = f"meritlens_regression_change_{unit_name(r['unit'])}"
            if name not in changes:
                changes[name] = GaugeMetricFamily(
                    name, f"Recent minus baseline of metrics in {r['unit']}: the estimate and its interval's bounds "
                    "(a bound the samples cannot set is absent).", labels=[*labels, "bound"])
            for bound in ("value", "low", "high"):
                if _finite(r["difference"][bound]):
                    changes[name].add_metric([*common, "estimate" if bound == "value" else bound],
                                             r["difference"][bound])
        yield verdicts
        yield from changes.values()
        if report["interval_confidence"] is not None:
            yield GaugeMetricFamily("meritlens_regression_interval_confidence", "Each regression interval's level: "
                                    "the report's confidence split over its comparisons (Bonferroni).",
                                    value=report["interval_confidence"])


class MetricsEndpoint:
    """`GET /metrics` over one store: the windows' registry and the collector's health registry."""

    def __init__(self, store, health: Health, readiness=None, window_lag=lambda: (0, 0), limiter=None, alerts=None,
                 regressions=None, redactor=None, memory_parts=dict):
        self._health = health
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(WindowCollector(store, health, readiness, window_lag, limiter, alerts, regressions,
                                                redactor, memory_parts))

    def install(self, app: web.Application) -> None:
        app.router.add_get(METRICS_PATH, self.metrics)

    def exposition(self) -> bytes:
        return generate_latest(self._health.registry) + generate_latest(self._registry)

    async def metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(None, self.exposition)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})
