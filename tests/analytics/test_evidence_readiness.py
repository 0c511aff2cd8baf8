"""Readiness: coverage (live collectors) and baseline evidence, through the real collector and on a file."""

from __future__ import annotations

import datetime as dt
import json
import textwrap

import duckdb
import pytest
from pydantic import ValidationError

from meritlens.analytics import CoverageReport
from tests.analytics.evidence_helpers import (
    CallSpec,
    Ids,
    TaskSpec,
    meritlens,
    post_spans,
    running_collector,
    support_bot_dataset,
)

BOT = "support-bot/answer"

PLANS = {
    "task_success": ("higher", "representative_task_set", 30, 1, "rate"),
    "total_task_cost": ("lower", "representative_task_set", 30, 1, "sum"),
    "end_to_end_latency": ("lower", "representative_task_set", 30, 1, "percentile"),
    "hallucination_rate": ("lower", "representative_task_set", 30, 1, "rate"),
    "consistency": ("higher", "repeated_same_input", 1, 30, "mean"),
    "tool_use_performance": ("higher", "representative_task_set", 30, 1, "rate"),
}


def write_profile(path, target: str, min_samples: dict[str, int]):
    body = [f'target = "{target}"']
    for metric, samples in min_samples.items():
        direction, strategy, cases, repetitions, aggregation = PLANS[metric]
        body.append(textwrap.dedent(f"""
            [metrics.{metric}]
            direction = "{direction}"
            strategy = "{strategy}"
            cases = {cases}
            repetitions = {repetitions}
            aggregation = "{aggregation}"
            min_samples = {samples}
            rationale = "test plan"
        """))
    path.write_text("\n".join(body))
    return str(path)


def readiness(*args) -> tuple[int, dict]:
    result = meritlens("readiness", "--format", "json", *args)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tasks = support_bot_dataset() + [TaskSpec("solo", start=500.0, task_id="only", calls=[CallSpec()])]
    ids = Ids(seed=21)
    spans = [s for t in tasks for s in t.spans(ids)]
    db = tmp_path_factory.mktemp("readiness") / "evidence.duckdb"
    with running_collector(db) as url:
        post_spans(url, spans)
        yield db, url


def test_ready_when_every_required_metric_has_a_live_collector(served, tmp_path):
    db, _ = served
    profile = write_profile(tmp_path / "p.toml", BOT,
                            {"task_success": 15, "total_task_cost": 15, "end_to_end_latency": 20})
    code, report = readiness("--profile", profile, "--db", str(db))
    assert code == 0
    assert report["required"] == ["task_success", "total_task_cost", "end_to_end_latency"]
    assert report["covered"] == report["required"] and report["missing"] == []
    assert report["ready"] is True and report["baseline_ready"] is True and report["shortfalls"] == []
    assert dt.datetime.fromisoformat(report["checked_at"]).tzinfo is not None
    by_metric = {m["metric"]: m for m in report["metrics"]}
    assert by_metric["task_success"]["sample_count"] == 17 and by_metric["task_success"]["evidence_digest"]


def test_not_ready_lists_exactly_the_missing_metrics(served, tmp_path):
    db, url = served
    profile = write_profile(tmp_path / "p.toml", BOT, {"task_success": 2, "hallucination_rate": 2,
                                                       "total_task_cost": 2, "consistency": 2})
    code, report = readiness("--profile", profile, "--url", url)
    assert code == 1
    assert report["missing"] == ["hallucination_rate", "consistency"]
    assert report["covered"] == ["task_success", "total_task_cost"]
    assert report["ready"] is False and report["baseline_ready"] is False
    assert "hallucination_rate: no window in scope 'all' (not_configured: no plugin or evaluator has produced one)" \
        in report["shortfalls"]


def test_baseline_needs_the_minimum_samples(served, tmp_path):
    db, _ = served
    profile = write_profile(tmp_path / "p.toml", BOT, {"task_success": 30, "total_task_cost": 19})
    code, report = readiness("--profile", profile, "--db", str(db))
    assert code == 0, "coverage is ready: exit 0 without --baseline"
    assert report["ready"] is True and report["baseline_ready"] is False
    assert report["shortfalls"] == ["task_success: 17 of 30 samples"]
    code, _ = readiness("--profile", profile, "--db", str(db), "--baseline")
    assert code == 1
    text = meritlens("readiness", "--profile", profile, "--db", str(db))
    assert text.returncode == 0
    assert "coverage: READY (2 of 2 required metrics covered)" in text.stdout
    assert "baseline: NOT READY" in text.stdout and "- task_success: 17 of 30 samples" in text.stdout


def test_baseline_in_an_assessment_scope(served, tmp_path):
    db, _ = served
    profile = write_profile(tmp_path / "p.toml", BOT, {"task_success": 11, "total_task_cost": 6,
                                                       "tool_use_performance": 2})
    code, report = readiness("--profile", profile, "--db", str(db), "--scope", "challenger-1", "--baseline")
    assert code == 1
    assert report["scope"] == "challenger-1" and report["ready"] is True  # live in some scope of the target
    assert report["shortfalls"] == [
        "task_success: 6 of 11 samples",
        "total_task_cost: 5 of 6 samples",
        "tool_use_performance: state is not_applicable, not measured",
        "tool_use_performance: no finite value",
        "tool_use_performance: 0 of 2 samples",
        "tool_use_performance: no evidence reference",
    ]


def test_live_but_insufficient_metric_is_covered_with_shortfalls(served, tmp_path):
    db, _ = served
    profile = write_profile(tmp_path / "p.toml", "solo", {"end_to_end_latency": 2, "task_success": 1})
    code, report = readiness("--profile", profile, "--db", str(db), "--baseline")
    assert code == 1
    assert report["covered"] == ["end_to_end_latency"] and report["missing"] == ["task_success"]
    assert report["shortfalls"] == [
        "end_to_end_latency: state is insufficient_evidence, not measured",
        "end_to_end_latency: 1 of 2 samples",
        "task_success: state is not_configured, not measured",
        "task_success: no finite value",
        "task_success: 0 of 1 samples",
        "task_success: no evidence reference",
    ]


def test_target_option_overrides_the_profile_target(served, tmp_path):
    db, _ = served
    profile = write_profile(tmp_path / "p.toml", BOT, {"total_task_cost": 3, "task_success": 3,
                                                       "tool_use_performance": 3})
    code, report = readiness("--profile", profile, "--db", str(db), "--target", "router/classify")
    assert code == 1 and report["target"] == "router/classify"
    assert report["missing"] == ["task_success", "tool_use_performance"]


def test_coverage_view_shows_the_latest_check_per_target(served, tmp_path):
    db, _ = served
    ready = write_profile(tmp_path / "ready.toml", "router/classify", {"total_task_cost": 3})
    not_ready = write_profile(tmp_path / "not.toml", "router/classify", {"total_task_cost": 3, "consistency": 2})
    count = ("select count(*) as n from coverage_checks where target_id = 'router/classify'", "--db", str(db),
             "--format", "json")
    before = json.loads(meritlens("sql", *count).stdout)[0]["n"]
    assert readiness("--profile", not_ready, "--db", str(db))[0] == 1
    assert readiness("--profile", ready, "--db", str(db))[0] == 0
    result = meritlens("sql", "select target_id, scope, required, covered, missing, ready, baseline_ready "
                       "from coverage where target_id = 'router/classify'", "--db", str(db), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{
        "target_id": "router/classify", "scope": "all", "required": ["total_task_cost"],
        "covered": ["total_task_cost"], "missing": [], "ready": True, "baseline_ready": True,
    }]
    assert json.loads(meritlens("sql", *count).stdout) == [{"n": before + 2}], "every check is kept"


def test_usage_errors_exit_2(served, tmp_path):
    db, _ = served
    bad = tmp_path / "bad.toml"
    bad.write_text('target = "x"\n[metrics.task_sucess]\n')
    result = meritlens("readiness", "--profile", str(bad), "--db", str(db))
    assert result.returncode == 2 and "did you mean 'task_success'" in result.stderr
    assert meritlens("readiness", "--db", str(db)).returncode == 2  # no --profile
    good = write_profile(tmp_path / "p.toml", BOT, {"total_task_cost": 1})
    unreachable = meritlens("readiness", "--profile", good, "--url", "http://127.0.0.1:9")
    assert unreachable.returncode == 2 and "no collector reachable" in unreachable.stderr


# --- the report model -----------------------------------------------------------------------------
NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def test_report_ready_is_derived_from_the_sets():
    report = CoverageReport(target="t", required=["a_metric", "b_metric"], covered=["a_metric"], checked_at=NOW)
    assert report.missing == ["b_metric"] and report.ready is False and report.baseline_ready is False
    full = CoverageReport(target="t", required=["a_metric"], covered=["a_metric"], checked_at=NOW)
    assert full.ready is True and full.baseline_ready is True
    assert CoverageReport(target="t", required=["a_metric"], covered=["a_metric"], checked_at=NOW,
                          shortfalls=["a_metric: 1 of 2 samples"]).baseline_ready is False
    with pytest.raises(ValidationError, match="frozen"):
        full.ready = False  # type: ignore[misc]


def test_report_with_a_contradicting_ready_cannot_be_constructed():
    with pytest.raises(ValidationError, match="ready=True contradicts"):
        CoverageReport(target="t", required=["a", "b"], covered=["a"], checked_at=NOW, ready=True)
    with pytest.raises(ValidationError, match="missing=\\[\\] contradicts"):
        CoverageReport.model_validate({"target": "t", "required": ["a", "b"], "covered": ["a"],
                                       "checked_at": NOW, "missing": []})
    with pytest.raises(ValidationError, match="not required"):
        CoverageReport(target="t", required=["a"], covered=["a", "z"], checked_at=NOW)
    round_trip = CoverageReport(target="t", required=["a", "b"], covered=["a"], checked_at=NOW)
    assert CoverageReport.model_validate_json(round_trip.model_dump_json()) == round_trip


# --- on a file, and with a plugin's windows ---------------------------------------------------------
PLUGIN_ROW = """INSERT OR REPLACE INTO windows VALUES ('{target}', '{metric}', 'all', 'rate', {value}, 'ratio', 20,
  'measured', 20, {value}, 0, 1, 0, 1, 1, 1, now(), now(), 'file:///evals/{metric}.json', 'application/json', 'abc123',
  now(), 0.3, 0.0)"""


def test_plugin_windows_count_and_survive_the_processor(tmp_path):
    db = tmp_path / "evidence.duckdb"
    ids = Ids(seed=31)
    tasks = [TaskSpec(BOT, start=i, task_id=f"t{i}", calls=[CallSpec()], success=True) for i in range(3)]
    with running_collector(db) as url:
        post_spans(url, [s for t in tasks for s in t.spans(ids)])
    profile = write_profile(tmp_path / "p.toml", BOT, {"task_success": 3, "hallucination_rate": 2})

    # no collector: the command opens the file, checks and records
    code, report = readiness("--profile", profile, "--db", str(db))
    assert code == 1 and report["missing"] == ["hallucination_rate"]

    # a metric plugin writes its windows into the same table (as `meritlens evaluate` does)
    with duckdb.connect(str(db)) as con:
        con.execute(PLUGIN_ROW.format(target=BOT, metric="hallucination_rate", value=0.1))
        con.execute(PLUGIN_ROW.format(target=BOT, metric="task_quality", value=0.75))
    code, report = readiness("--profile", profile, "--db", str(db), "--baseline")
    assert code == 0 and report["covered"] == ["task_success", "hallucination_rate"]

    # the processor recomputes every window at start and on new spans: the plugin's rows stay
    with running_collector(db) as url:
        post_spans(url, TaskSpec(BOT, start=10, task_id="t9", calls=[CallSpec()], success=False).spans(ids))
        code, report = readiness("--profile", profile, "--url", url)
        rows = meritlens("sql", "select metric, value, evidence_uri from windows where target_id = "
                         f"'{BOT}' and metric in ('hallucination_rate', 'task_quality', 'task_success') "
                         "order by metric", "--db", str(db), "--format", "json")
    assert code == 0
    assert json.loads(rows.stdout) == [
        {"metric": "hallucination_rate", "value": 0.1, "evidence_uri": "file:///evals/hallucination_rate.json"},
        {"metric": "task_quality", "value": 0.75, "evidence_uri": "file:///evals/task_quality.json"},
        {"metric": "task_success", "value": 0.75,
         "evidence_uri": "meritlens://evidence.duckdb/spans?target_id=support-bot%2Fanswer&scope=all"
                         "&metric=task_success"},
    ]
    history = meritlens("sql", "select count(*) as n from coverage_checks", "--db", str(db), "--format", "json")
    assert json.loads(history.stdout) == [{"n": 3}]


def test_profile_check_shows_current_windows_and_estimated_cost(served, tmp_path):
    db, _ = served
    profile = write_profile(tmp_path / "p.toml", BOT, {"task_success": 30, "total_task_cost": 30,
                                                       "hallucination_rate": 30})
    result = meritlens("profile", "check", profile, "--db", str(db))
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.split()}
    assert rows["task_success"].endswith("span window          measured, 17 samples")
    assert rows["hallucination_rate"].endswith("plugin or evaluator  no window")
    # 19 priced bot tasks; the profile's one design runs 30 tasks
    assert "estimated application cost: 30 runs x $" in result.stdout
    assert "(over 19 measured tasks)" in result.stdout
