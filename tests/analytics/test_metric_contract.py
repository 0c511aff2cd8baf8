"""The metric contract: every built-in is catalogued and tested, and does not turn 'does not apply' into zero."""

from __future__ import annotations

import datetime as dt
import logging
import math
from pathlib import Path

import pytest

from meritlens.analytics import BUILTIN_METRICS, METRICS, Measurement, MetricOptions, load_registry
from meritlens.analytics.testing import make_span, scope_evidence

METRIC_TESTS = Path(__file__).parent / "metrics"


def test_every_registered_metric_has_its_own_test_file_and_vice_versa():
    # Built-ins are what this repository registers; installed plugins are tested in their own packages.
    registered = set(load_registry(entry_points=[]).names)
    assert registered == set(BUILTIN_METRICS)
    files = {p.stem.removeprefix("test_") for p in METRIC_TESTS.glob("test_*.py")}
    assert registered - files == set(), "registered metrics without tests/analytics/metrics/test_<name>.py"
    assert files - registered == set(), "metric test files whose metric is not registered"


def test_every_builtin_is_a_catalogue_metric_with_its_unit():
    for name, cls in BUILTIN_METRICS.items():
        assert name in METRICS, name
        assert cls().declared_unit() == METRICS[name].unit
        assert cls().declared_aggregation() == METRICS[name].default_aggregation


def _bare_scope():
    # Two application LLM calls with token counts and nothing else: no outputs, schema, repeated
    # cases, tool spans, errors, retries, steps, outcomes or scores.
    return scope_evidence([
        make_span(task_id="t1", case_id="c1", input_tokens=10, output_tokens=5),
        make_span(task_id="t2", case_id="c2", input_tokens=12, output_tokens=7),
    ])


@pytest.mark.parametrize("name", sorted(BUILTIN_METRICS))
def test_a_builtin_that_does_not_apply_returns_nothing_and_logs_one_info_line(name, tmp_path, caplog):
    metric = BUILTIN_METRICS[name]()
    with caplog.at_level(logging.INFO, logger="meritlens.analytics"):
        result = metric.compute(_bare_scope(), run_dir=tmp_path, options=MetricOptions(), judge=None)
    assert result == []
    lines = [r for r in caplog.records
             if r.levelno == logging.INFO and r.getMessage().startswith(f"{name} does not apply")]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _measurement(**overrides):
    fields = dict(metric_name="m", value=0.5, unit="ratio", summary="half", sample_count=2,
                  evidence=frozenset({"a" * 32 + ":" + "b" * 16}))
    fields.update(overrides)
    return Measurement(**fields)


@pytest.mark.parametrize("overrides, message", [
    ({"value": math.nan}, "not a finite number"),
    ({"value": math.inf}, "not a finite number"),
    ({"value": None}, "not a finite number"),
    ({"sample_count": 0}, "positive integer"),
    ({"evidence": frozenset()}, "evidence is empty"),
    ({"summary": "two\nlines"}, "one non-empty line"),
    ({"summary": ""}, "one non-empty line"),
])
def test_a_measurement_refuses_what_is_not_an_observation(overrides, message):
    with pytest.raises(ValueError, match=message):
        _measurement(**overrides)


def test_a_zero_is_a_valid_observation():
    assert _measurement(value=0.0).value == 0.0


def test_scope_evidence_refuses_orchestration_spans():
    with pytest.raises(ValueError, match="application spans only"):
        scope_evidence([make_span(role="orchestration")])


def test_tasks_group_by_task_id_else_trace():
    evidence = scope_evidence([
        make_span(task_id="t1", trace_id="1" * 32), make_span(task_id="t1", trace_id="2" * 32),
        make_span(trace_id="3" * 32), make_span(trace_id="3" * 32, span_id="f" * 16),
    ])
    assert sorted((t.key, len(t.spans)) for t in evidence.tasks) == [("3" * 32, 2), ("t1", 2)]
    assert all(isinstance(s.end_time, dt.datetime) for s in evidence.spans)
