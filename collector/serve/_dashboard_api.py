"""The dashboard's explore endpoints: the overview across targets, a target over time and by model,
the trace list, one trace, and the evidence behind a window (all GET, read-only JSON).

- ``/api/dashboard/overview``: one row per target with its figures and readiness, and what the redaction
  policy changed, by rule;
- ``/api/dashboard/timeseries?target=&range=&from=&to=&bucket=``: per time bucket;
- ``/api/dashboard/models?target=&range=&from=&to=``: calls by provider and model;
- ``/api/dashboard/traces?target=&model=&status=&range=&from=&to=&limit=``: the trace list;
- ``/api/dashboard/trace?trace=``: every span of one trace with its attributes;
- ``/api/dashboard/evidence?target=&scope=&metric=``: the samples and spans a window was computed
  from, and whether their digest is the window's evidence digest;
- ``/api/dashboard/regressions?target=``: the recent day against the week before, every metric of every
  target (or one target's rows of that report), as `meritlens regressions` reports it.

`Explorer.document(view, query)` gives the same documents for the page's first paint.
"""

from __future__ import annotations

import asyncio
import json
import math

from aiohttp import web

from meritlens.analytics.engine import (
    COVERAGE_VIEW,
    DEFINITIONS_BY_METRIC,
    SCOPE_ALL,
    WINDOW_COLUMN_NAMES,
    WINDOWS_TABLE,
    sample_statistic,
    span_keys_digest,
    sql_string,
    window_samples_sql,
)
from meritlens.collector.serve import _dashboard_queries as q
from meritlens.collector.store._results import json_default

MAX_EVIDENCE_SAMPLES = 500
"""Samples listed on the evidence page (the digest is checked over all of them)."""
_JSON_COLUMNS = ("attributes", "resource", "events")
_OVERVIEW_FIGURES = {
    "cost_state": ("total_cost", "mean_cost"),
    "latency_state": ("latency_p50", "latency_p95"),
    "success_state": ("success_rate",),
}
"""The overview's figures, by the state column of the window they come from."""


def _json(body, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(body, default=json_default),
                        content_type="application/json", headers={"Cache-Control": "no-store"})


def _finite(value):
    return value if not isinstance(value, float) or math.isfinite(value) else None


def _report_facts(report: dict | None) -> dict | None:
    """What a regressions report compared and how, without its rows."""
    if report is None:
        return None
    return {k: report[k] for k in ("recent", "baseline", "same_hours", "confidence", "correction", "family_size",
                                   "interval_confidence")}


class Explorer:
    """The explore endpoints over a store's read-only ``query`` and the dashboard's readiness provider."""

    def __init__(self, store, readiness=None, regressions=None, redactor=None):
        self._store = store
        self._readiness = readiness
        self._report = regressions
        """The current regressions report (collector/serve/_regressions.py); None without windows by time."""
        self._redactor = redactor

    def install(self, app: web.Application) -> None:
        for view in ("overview", "timeseries", "models", "traces", "trace", "evidence", "regressions"):
            app.router.add_get(f"/api/dashboard/{view}", self._handler(view))

    def _handler(self, view: str):
        async def handle(request: web.Request) -> web.Response:
            try:
                return _json(await self.document(view, request.query))
            except q.BadParameter as exc:
                return _json({"error": str(exc)}, 400)
        return handle

    async def document(self, view: str, query) -> dict:
        """The JSON document of ``view`` for the query parameters ``query``; BadParameter names a wrong one."""
        return await asyncio.get_running_loop().run_in_executor(None, getattr(self, "_" + view), query)

    def _rows(self, sql: str) -> list[dict]:
        result = self._store.query(sql)
        return [{k: _finite(v) for k, v in zip(result.columns, row, strict=True)} for row in result.rows]

    @staticmethod
    def _target(query) -> str:
        target = query.get("target")
        if not target:
            raise q.BadParameter("give the target: ?target=<target id>")
        return target

    # --- views ------------------------------------------------------------------------------------
    def _overview(self, query) -> dict:
        rows = self._rows(q.overview_sql())
        recorded = {r["target_id"]: r for r in self._rows(
            f"SELECT target_id, ready, baseline_ready, missing, checked_at FROM {COVERAGE_VIEW} "
            f"WHERE scope = '{SCOPE_ALL}'")}
        seen = {r["target_id"] for r in rows}
        for target in getattr(self._readiness, "targets", []):
            if target not in seen:  # a profile's target with no spans yet: nothing it needs is covered
                rows.append({"target_id": target, "spans": 0, "tasks": 0, "last_seen": None})
        for row in rows:
            row["readiness"] = self._readiness_of(row["target_id"], recorded.get(row["target_id"]))
            for state, figures in _OVERVIEW_FIGURES.items():
                if row.get(state) != "measured":  # a figure of a window that is not measured is not shown
                    row.update(dict.fromkeys(figures))
        report = self._report() if self._report is not None else None
        for row in rows:
            found = [r for r in report["regressions"] if r["target"] == row["target_id"]] if report else []
            row["regressions"] = None if report is None else {
                "compared": len(found), **{verdict: [r["metric"] for r in found if r["verdict"] == verdict]
                                           for verdict in ("worse", "better")}}
        return {"db": self._store.db_name, "readiness_profiles": self._readiness is not None, "targets": rows,
                "regressions": _report_facts(report), "redaction": self._redaction()}

    def _redaction(self) -> dict | None:
        """What the redaction policy changed since the collector started, by rule (None: no policy)."""
        if self._redactor is None:
            return None
        counts = self._redactor.counts()
        return {"policy": self._redactor.policy.source,
                "rules": [{"rule": rule, "action": action, "count": counts.get((rule, action), 0)}
                          for rule, action in self._redactor.policy.rule_names]}

    def _regressions(self, query) -> dict:
        """The current report, of one target when ``target`` is given (the family stays every target's)."""
        if self._report is None:
            return {"available": False, "regressions": [], "not_compared": []}
        report = dict(self._report(), available=True)
        target = query.get("target")
        if target:
            for part in ("regressions", "not_compared"):
                report[part] = [r for r in report[part] if r["target"] == target]
        return report

    def _readiness_of(self, target: str, recorded: dict | None) -> dict | None:
        if self._readiness is not None:
            reports = self._readiness(target)["reports"]
            if reports:
                return {"source": "profile", "profiles": [r["profile"] for r in reports],
                        "ready": all(r["ready"] for r in reports),
                        "baseline_ready": all(r["baseline_ready"] for r in reports),
                        "missing": sorted({m for r in reports for m in r["missing"]})}
        if recorded is not None:
            return {"source": "recorded", "checked_at": recorded["checked_at"], "ready": recorded["ready"],
                    "baseline_ready": recorded["baseline_ready"], "missing": list(recorded["missing"])}
        return None

    def _timeseries(self, query) -> dict:
        target = self._target(query)
        span = q.time_range(query)
        [extent] = self._rows(q.task_extent_sql(target, span))
        seconds = q.bucket_seconds(query.get("bucket", "auto"), span.start or extent["first"],
                                   span.end or extent["last"])
        rows = self._rows(q.timeseries_sql(target, span, seconds))
        return {"target_id": target, "range": span.to_json(), "bucket_seconds": seconds,
                "first": extent["first"], "last": extent["last"], "buckets": rows}

    def _models(self, query) -> dict:
        target = self._target(query)
        span = q.time_range(query)
        return {"target_id": target, "range": span.to_json(), "models": self._rows(q.models_sql(target, span))}

    def _traces(self, query) -> dict:
        raw = query.get("limit", "100")
        try:
            limit = int(raw)
            if not 1 <= limit <= q.MAX_TRACES:
                raise ValueError
        except ValueError:
            raise q.BadParameter(f"limit must be an integer from 1 to {q.MAX_TRACES}, got {raw!r}") from None
        span = q.time_range(query)
        rows = self._rows(q.traces_sql(target=query.get("target") or None, model=query.get("model") or None,
                                       status=query.get("status") or None, span=span, limit=limit))
        filters = {name: query.get(name) or None for name in ("target", "model", "status")}
        return {"range": span.to_json(), "filters": filters, "limit": limit, "traces": rows}

    def _trace(self, query) -> dict:
        trace_id = (query.get("trace") or "").strip().lower()
        spans = self._rows(q.trace_sql(trace_id))
        for span in spans:
            for column in _JSON_COLUMNS:
                if isinstance(span.get(column), str):
                    span[column] = json.loads(span[column])
        return {"trace_id": trace_id, "spans": spans}

    def _evidence(self, query) -> dict:
        target = self._target(query)
        scope = query.get("scope", SCOPE_ALL)
        metric = query.get("metric")
        if not metric:
            raise q.BadParameter("give the metric: ?metric=<metric id>")
        found = self._rows(
            f"SELECT {', '.join(WINDOW_COLUMN_NAMES)} FROM {WINDOWS_TABLE} WHERE target_id = {sql_string(target)} "
            f"AND scope = {sql_string(scope)} AND metric = {sql_string(metric)}")
        document = {"target_id": target, "scope": scope, "metric": metric,
                    "window": found[0] if found else None, "computed_from_spans": metric in DEFINITIONS_BY_METRIC}
        if metric not in DEFINITIONS_BY_METRIC:
            return document  # a plugin's or evaluator's window: its evidence is what its URI names
        samples = self._rows(window_samples_sql(target, scope, metric))
        keys = [key for sample in samples for key in sample["span_keys"]]
        digest = span_keys_digest(keys)
        stored = document["window"]["evidence_digest"] if document["window"] else None
        shown = samples[:MAX_EVIDENCE_SAMPLES]
        spans = {r["key"]: r for r in self._rows(q.spans_by_key_sql(
            [key for sample in shown for key in sample["span_keys"]]))}
        for sample in shown:
            sample["spans"] = [spans.get(key, {"key": key}) for key in sorted(sample.pop("span_keys"))]
        document.update({
            "statistic": sample_statistic(metric), "sample_count": len(samples), "span_count": len(keys),
            "digest": digest, "digest_matches": stored == digest if stored else None,
            "samples": shown, "truncated": len(samples) > len(shown),
        })
        return document
