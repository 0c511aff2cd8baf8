"""Readiness counts an evaluator's `<metric>.evaluated` window when the processor's window has no value."""

from __future__ import annotations

import datetime as _dt

from meritlens.analytics import Window, check_readiness, profile_from_dict
from meritlens.analytics._schema import WINDOW_COLUMN_NAMES
from meritlens.analytics._windows import EVALUATED_SUFFIX
from tests.store_under_test import StoreUnderTest

NOW = _dt.datetime(2026, 11, 30, tzinfo=_dt.UTC)
PROFILE = profile_from_dict({
    "target": "bot",
    "metrics": {"task_quality": {
        "direction": "higher", "strategy": "representative_task_set", "cases": 10, "repetitions": 1,
        "aggregation": "mean", "min_samples": 10, "rationale": "judge-scored answers"}},
})


def _window(metric: str, value: float | None, samples: int, state: str) -> Window:
    row = dict.fromkeys(WINDOW_COLUMN_NAMES)
    row.update(target_id="bot", metric=metric, scope="all", aggregation="mean", value=value, unit="score",
               sample_count=samples, state=state, computed_at=NOW)
    if value is not None:
        row.update(count=samples, mean=value, evidence_uri="meritlens://x", evidence_media_type="t",
                   evidence_digest="ab" * 32, first_span_time=NOW, last_span_time=NOW)
    return Window(**row)


def test_an_evaluated_window_stands_in_for_a_processor_window_without_value(tmp_path):
    store = StoreUnderTest(str(tmp_path / "w.duckdb"))
    store.start()
    try:
        store.write_windows([_window("task_quality", None, 0, "not_configured"),
                             _window("task_quality" + EVALUATED_SUFFIX, 0.8, 12, "measured")])
        report = check_readiness(PROFILE, store.query, now=NOW)
        assert report.covered == ["task_quality"] and report.ready and report.baseline_ready
        assert report.metrics[0].collector == "evaluator" and report.metrics[0].value == 0.8

        # Once the processor has a value of its own (recorded scores), that window is the one used.
        store.write_windows([_window("task_quality", 0.6, 4, "measured")])
        report = check_readiness(PROFILE, store.query, now=NOW)
        assert report.metrics[0].collector == "span window" and report.metrics[0].value == 0.6
        assert not report.baseline_ready and "task_quality: 4 of 10 samples" in report.shortfalls
    finally:
        store.shutdown()


def test_without_any_value_the_metric_is_missing(tmp_path):
    store = StoreUnderTest(str(tmp_path / "w.duckdb"))
    store.start()
    try:
        store.write_windows([_window("task_quality", None, 0, "not_configured")])
        report = check_readiness(PROFILE, store.query, now=NOW)
        assert report.covered == [] and report.missing == ["task_quality"] and not report.ready
    finally:
        store.shutdown()
