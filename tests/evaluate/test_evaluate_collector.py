"""`meritlens evaluate` while a real collector process holds the DuckDB file: it reads spans through
POST /api/sql and writes windows through POST /api/windows (and judge spans through /v1/traces)."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest

from meritlens.analytics._evaluate import window_metric_name as W
from meritlens.instrumentation import conventions as c
from tests.evaluate.evaluate_support import TARGET, RunningCollector, run_cli, scenario_spans, span


def evaluated(collector, metric: str) -> dict | None:
    rows = collector.sql(f"SELECT * FROM windows WHERE target_id = '{TARGET}' AND scope = 'all'"
                         f" AND metric = '{metric}'")
    return rows[0] if rows else None


def test_evaluate_goes_through_the_collector_and_reruns_merge(tmp_path, collector_factory):
    db = tmp_path / "live.duckdb"
    collector = collector_factory(db)
    collector.send(scenario_spans())
    run_dir = tmp_path / "run"

    first = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(run_dir),
                    "--metrics", "tool_use_performance,consistency,task_quality", "--judge", "fake",
                    "--judge-replicas", "1")
    assert first.returncode == 0, first.stderr
    tool = evaluated(collector, W("tool_use_performance"))
    consistency = evaluated(collector, W("consistency"))
    quality = evaluated(collector, W("task_quality"))
    assert (tool["state"], tool["value"], tool["sample_count"]) == ("measured", 0.5, 2)
    assert (consistency["state"], consistency["value"]) == ("measured", 0.5)
    assert quality["state"] == "measured" and "judge=fake-judge" in quality["evidence_uri"]
    judge_spans = collector.sql("SELECT role, task_id FROM spans WHERE role = 'orchestration'")
    assert sorted(r["task_id"] for r in judge_spans) == ["t1", "t2", "t3", "t4"]
    # The judge's spans touched no window key; the application's token windows are unchanged.
    assert evaluated(collector, "input_tokens")["value"] == 400

    # New spans arrive through the collector; a re-run of one metric replaces only its window.
    collector.send([span(7, **{c.TASK_ID: "t5", c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                               c.GEN_AI_TOOL_NAME: "search"})])
    second = run_cli("evaluate", "--url", collector.url, "--db", str(db), "--target", TARGET,
                     "--run-dir", str(run_dir), "--metrics", "tool_use_performance", "--format", "json")
    assert second.returncode == 0, second.stderr
    assert f'"window": "{W("tool_use_performance")}"' in second.stdout
    tool_again = evaluated(collector, W("tool_use_performance"))
    assert tool_again["value"] == pytest.approx(2 / 3) and tool_again["sample_count"] == 3
    assert tool_again["computed_at"] > tool["computed_at"]
    assert evaluated(collector, W("consistency")) == consistency
    assert evaluated(collector, W("task_quality")) == quality


def test_evaluate_reads_past_the_collectors_row_limit(tmp_path, collector_factory):
    db = tmp_path / "many.duckdb"
    collector = collector_factory(db)
    tools = [span(100 + i, **{c.TASK_ID: f"t{i // 10}", c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                              c.GEN_AI_TOOL_NAME: "search"}, error=(i % 4 == 0)) for i in range(12_000)]
    for start in range(0, len(tools), 3000):
        collector.send(tools[start:start + 3000])
    result = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(tmp_path / "run"),
                     "--metrics", "tool_use_performance")
    assert result.returncode == 0, result.stderr
    window = evaluated(collector, W("tool_use_performance"))
    assert window["sample_count"] == 12_000
    assert window["value"] == pytest.approx(0.75)


def _window(**overrides) -> dict:
    window = {
        "target_id": TARGET, "metric": "preference_fit", "scope": "all", "aggregation": "mean", "value": 0.8,
        "unit": "score", "sample_count": 3, "state": "measured", "evidence_uri": "meritlens://x/spans",
        "evidence_media_type": "application/vnd.meritlens.span-set", "evidence_digest": "a" * 64,
        "computed_at": dt.datetime.now(dt.UTC).isoformat(),
    }
    window.update(overrides)
    return window


@pytest.fixture(scope="module")
def validation_collector(tmp_path_factory):
    collector = RunningCollector(tmp_path_factory.mktemp("validation") / "v.duckdb")
    yield collector
    collector.stop()


@pytest.mark.parametrize("body, message", [
    ({"windows": [_window(state="measured", value=None)]}, "needs a value"),
    ({"windows": [_window(state="not_configured", value=0.0, sample_count=0)]}, "missing is never a number"),
    ({"windows": [_window(value=float("inf"))]}, "finite number"),
    ({"windows": [_window(aggregation="median")]}, "aggregation 'median'"),
    ({"windows": [_window(state="great")]}, "state 'great'"),
    ({"windows": [_window(evidence_digest="xyz")]}, "evidence_digest"),
    ({"windows": [_window(computed_at="yesterday")]}, "computed_at"),
    ({"windows": [_window(sample_count=-1)]}, "sample_count"),
    ({"windows": [_window(color="red")]}, "unknown fields"),
    ({"windows": [_window(), _window()]}, "appears twice"),
    ({"windows": [_window(metric="fine"), {"metric": "half"}]}, "window 1"),
    ({"rows": []}, "body must be"),
])
def test_the_windows_endpoint_validates_and_writes_all_or_nothing(validation_collector, body, message):
    collector = validation_collector
    # json.dumps writes Infinity for inf, as a careless client would.
    reply = httpx.post(collector.url + "/api/windows", content=json.dumps(body), timeout=10)
    assert reply.status_code == 400
    assert message in reply.json()["error"]
    assert collector.sql("SELECT count(*) AS n FROM windows")[0]["n"] == 0


def test_the_windows_endpoint_writes_valid_windows(tmp_path, collector_factory):
    collector = collector_factory(tmp_path / "w.duckdb")
    reply = httpx.post(collector.url + "/api/windows", json={"windows": [_window(), _window(metric="other", value=None,
                       state="not_applicable", sample_count=0, evidence_uri=None, evidence_digest=None)]}, timeout=10)
    assert reply.status_code == 200 and reply.json() == {"written": 2}
    rows = collector.sql("SELECT metric, state, value FROM windows ORDER BY metric")
    assert rows == [{"metric": "other", "state": "not_applicable", "value": None},
                    {"metric": "preference_fit", "state": "measured", "value": 0.8}]
    assert httpx.get(collector.url + "/api/windows", timeout=10).status_code == 405
    bad_json = httpx.post(collector.url + "/api/windows", content=b"{nope", timeout=10)
    assert bad_json.status_code == 400
