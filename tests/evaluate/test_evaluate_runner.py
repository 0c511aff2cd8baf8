"""The evaluation runner in-process, on a real DuckDB file: measurement checks, failures, paging."""

from __future__ import annotations

import logging

import pytest

from meritlens.analytics import Measurement, Metric, evaluate
from meritlens.analytics._builtin_metrics import ToolUsePerformance
from meritlens.analytics._evaluate import QueryPage, load_evidence
from meritlens.analytics._evaluate import window_metric_name as W
from meritlens.collector.cli._evaluation import FileEvaluationStore
from tests.evaluate.evaluate_support import TARGET, scenario_spans, store_spans


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "runner.duckdb"
    store_spans(db, scenario_spans())
    opened = FileEvaluationStore(str(db))
    yield opened
    opened.close()


def stored_windows(store) -> dict[str, tuple]:
    page = store.query(f"SELECT metric, state, value FROM windows WHERE target_id = '{TARGET}' AND scope = 'all'")
    return {row[0]: row[1:] for row in page.rows}


class Raising(Metric):
    name = "raising"
    unit = "things"

    def compute(self, evidence, *, run_dir, options, judge):
        raise ZeroDivisionError("division by zero in raising")


def _metric(name: str, **measurement_overrides):
    class Returning(Metric):
        unit = "ratio"

        def compute(self, evidence, *, run_dir, options, judge):
            span = evidence.spans[0]
            fields = dict(metric_name=self.name, value=0.5, unit="ratio", summary="s", sample_count=2,
                          evidence=frozenset({span.key}))
            fields.update(measurement_overrides)
            return [Measurement(**fields)]

    Returning.name = name
    return Returning


@pytest.mark.parametrize("metric, message", [
    (_metric("tool_use_performance", unit="percent"), "differs from the catalogue's 'ratio'"),
    (_metric("tool_use_performance", value=1.5), "outside [0, 1]"),
    (_metric("tool_use_performance", aggregation="sum"), "not allowed"),
    (_metric("custom", metric_name="task_success"), "use 'custom' or 'custom.<partition>'"),
    (_metric("custom", evidence=frozenset({"f" * 32 + ":" + "f" * 16})), "outside the scope"),
])
def test_measurements_that_break_the_rules_fail_their_metric(store, tmp_path, metric, message):
    before = store.query("SELECT * FROM windows ORDER BY ALL").rows
    result = evaluate(store, target_id=TARGET, scope="all", metrics=[metric], run_dir=tmp_path / "run")
    [outcome] = result.outcomes
    assert outcome.status == "failed"
    assert message in outcome.error
    assert result.windows == []
    assert store.query("SELECT * FROM windows ORDER BY ALL").rows == before


def test_a_raising_metric_is_logged_with_its_traceback_and_the_others_are_stored(store, tmp_path, caplog):
    with caplog.at_level(logging.ERROR):
        result = evaluate(store, target_id=TARGET, scope="all", metrics=[Raising, ToolUsePerformance],
                          run_dir=tmp_path / "run")
    assert [o.status for o in result.outcomes] == ["failed", "measured"]
    assert result.failed[0].error == "ZeroDivisionError: division by zero in raising"
    assert "Traceback" in caplog.text and "division by zero in raising" in caplog.text
    assert stored_windows(store)[W("tool_use_performance")] == ("measured", 0.5)
    assert "raising" not in stored_windows(store)


def test_partitions_are_stored_as_their_own_windows(store, tmp_path):
    class PerTool(Metric):
        name = "per_tool"
        unit = "ratio"
        aggregation = "single_value"

        def compute(self, evidence, *, run_dir, options, judge):
            tools = [s for s in evidence.spans if s.is_tool]
            return [self.measurement(value=1.0 - float(s.failed), summary=f"tool span {s.span_id}",
                                     tasks_or_spans=[s], sample_count=1, metric_name=f"per_tool.{s.span_id}")
                    for s in tools]

    result = evaluate(store, target_id=TARGET, scope="all", metrics=[PerTool], run_dir=tmp_path / "run")
    names = sorted(w.metric for w in result.windows)
    assert names == [f"per_tool.{2:016x}", f"per_tool.{4:016x}"]
    stored = stored_windows(store)
    assert stored[f"per_tool.{2:016x}"] == ("measured", 1.0)
    assert stored[f"per_tool.{4:016x}"] == ("measured", 0.0)


class CappedStore:
    """A store that answers at most ``cap`` rows per query and says so, like a collector's row limit."""

    def __init__(self, inner, cap):
        self.inner, self.cap, self.queries = inner, cap, 0
        self.db_name = inner.db_name

    def query(self, sql):
        self.queries += 1
        page = self.inner.query(sql)
        return QueryPage(page.columns, page.rows[: self.cap], len(page.rows) > self.cap)


def test_reading_spans_pages_past_a_row_limit(store):
    capped = CappedStore(store, cap=2)
    evidence = load_evidence(capped, TARGET, "all", page_size=5)
    assert len(evidence.spans) == 6
    assert len({s.key for s in evidence.spans}) == 6
    assert capped.queries == 4  # 2 + 2 + 2 rows, then an empty page
    assert len(load_evidence(store, TARGET, "all", page_size=4).spans) == 6


def test_a_window_the_processor_owns_is_never_overwritten(store, tmp_path):
    class Latency(Metric):
        """A plugin measuring a metric the collector's processor already windows from spans."""

        name = "end_to_end_latency"

        def compute(self, evidence, *, run_dir, options, judge):
            return [self.measurement(value=42.0, summary="42 s", tasks_or_spans=evidence.tasks,
                                     sample_count=len(evidence.tasks))]

    before = store.query(f"SELECT * FROM windows WHERE metric = 'end_to_end_latency' AND target_id = '{TARGET}'").rows
    assert before  # the processor's window exists
    result = evaluate(store, target_id=TARGET, scope="all", metrics=[Latency], run_dir=tmp_path / "run")
    assert [w.metric for w in result.windows] == ["end_to_end_latency.evaluated"]
    latency = f"SELECT * FROM windows WHERE metric = 'end_to_end_latency' AND target_id = '{TARGET}'"
    assert store.query(latency).rows == before
    assert stored_windows(store)["end_to_end_latency.evaluated"] == ("measured", 42.0)
