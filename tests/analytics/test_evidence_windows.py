"""Windows for every span-sourced metric, computed by the real collector from a realistic dataset."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import random

import pytest

from meritlens.analytics import CATALOGUE, METRICS, SPAN_WINDOW_METRICS, WindowState
from meritlens.analytics._catalogue import REPEATED_RUN_AGGREGATIONS
from meritlens.analytics._windows import list_windows_sql
from meritlens.collector.cli._query import run_query
from tests.analytics.evidence_helpers import (
    CallSpec,
    Ids,
    S,
    TaskSpec,
    expected_windows,
    meritlens,
    post_spans,
    running_collector,
    support_bot_dataset,
)

BOT = "support-bot/answer"


@pytest.fixture(scope="module")
def dataset():
    tasks = support_bot_dataset()
    ids = Ids(seed=7)
    spans = [span for task in tasks for span in task.spans(ids)]
    return tasks, spans


@pytest.fixture(scope="module")
def collector(tmp_path_factory, dataset):
    """A real collector that received the dataset in shuffled batches, one of them twice."""
    _, spans = dataset
    db = tmp_path_factory.mktemp("windows") / "evidence.duckdb"
    shuffled = spans[:]
    random.Random(4).shuffle(shuffled)
    batches = [shuffled[i:i + 17] for i in range(0, len(shuffled), 17)]
    with running_collector(db) as url:
        for batch in batches:
            post_spans(url, batch)
        post_spans(url, batches[0])  # a client retry: delivered twice, counted once
        yield db, url


def windows_json(db, *args) -> list[dict]:
    """`meritlens windows --format json ARGS`, run in-process through the same query path as the CLI
    (the collector holds the file, so the query goes through its SQL endpoint)."""
    options = dict(zip(args[::2], args[1::2], strict=True))
    result = run_query(list_windows_sql(target=options.get("--target"), scope=options.get("--scope"),
                                        metric=options.get("--metric")), db=str(db))
    return json.loads(json.dumps([dict(zip(result.columns, row, strict=True)) for row in result.rows], default=str))


def test_windows_command_prints_the_same_rows(collector):
    db, _ = collector
    result = meritlens("windows", "--db", str(db), "--format", "json", "--target", BOT)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == windows_json(db, "--target", BOT)


def expected_state(metric: str, expected) -> str:
    spec = METRICS[metric]
    needs = 2 if spec.default_aggregation in REPEATED_RUN_AGGREGATIONS or spec.reliability else 1
    if expected.value is None:
        configured = expected.samples > 0 if expected.configured is None else expected.configured
        return "insufficient_evidence" if configured else "not_configured"
    return "measured" if expected.samples >= needs else "insufficient_evidence"


def in_scope(tasks, target, scope):
    return [t for t in tasks if t.target == target and (scope == "all" or t.assessment == scope)]


@pytest.mark.parametrize("scope", ["all", "baseline-1", "challenger-1"])
def test_every_span_metric_has_the_window_the_spans_imply(collector, dataset, scope):
    db, _ = collector
    tasks, _ = dataset
    expected = expected_windows(in_scope(tasks, BOT, scope))
    assert set(expected) == set(SPAN_WINDOW_METRICS)
    rows = {w["metric"]: w for w in windows_json(db, "--target", BOT, "--scope", scope)}
    assert list(rows) == [m.id for m in CATALOGUE], "one row per catalogue metric, in catalogue order"
    for metric, want in expected.items():
        got = rows[metric]
        if scope == "challenger-1" and metric == "tool_use_performance":
            assert got["state"] == "not_applicable" and got["value"] is None  # tool calls observed: all zero
            continue
        if metric == "reasoning_efficiency" and scope == "challenger-1":
            assert got["state"] == "not_configured"  # no reasoning tokens reported
            continue
        assert got["aggregation"] == METRICS[metric].default_aggregation.value, metric
        assert got["unit"] == METRICS[metric].unit
        assert got["sample_count"] == want.samples, metric
        assert got["state"] == expected_state(metric, want), metric
        if want.value is None:
            assert got["value"] is None, metric
        else:
            assert got["value"] == pytest.approx(want.value, rel=1e-9), metric
        if want.samples:
            assert got["evidence_digest"] == multiset_digest(want.keys), metric
            assert got["evidence_media_type"] == "application/vnd.meritlens.span-set"
            assert f"metric={metric}" in got["evidence_uri"]
        else:
            assert got["evidence_digest"] is None and got["evidence_uri"] is None, metric
        if want.end_times:
            first = dt.datetime.fromisoformat(got["first_span_time"])
            last = dt.datetime.fromisoformat(got["last_span_time"])
            assert first == dt.datetime.fromtimestamp(min(want.end_times) // 1000 / 1e6, dt.UTC)
            assert last == dt.datetime.fromtimestamp(max(want.end_times) // 1000 / 1e6, dt.UTC)
    for metric in METRICS:
        if metric not in SPAN_WINDOW_METRICS:
            assert rows[metric]["state"] == "not_configured" and rows[metric]["value"] is None
            assert rows[metric]["computed_at"] is None, "no window is stored for plugin-only metrics"


def test_the_dataset_exercises_every_kind_of_window(collector):
    db, _ = collector
    states = {(w["metric"], w["state"]) for w in windows_json(db, "--target", BOT, "--scope", "all")}
    measured = {m for m, s in states if s == "measured"}
    assert measured == set(SPAN_WINDOW_METRICS), "every span-sourced metric is measured on the full dataset"


def test_distribution_summary_describes_the_task_values(collector, dataset):
    db, _ = collector
    tasks, _ = dataset
    latencies = sorted((t.end_ns - t.start_ns) / S for t in in_scope(tasks, BOT, "baseline-1"))
    (window,) = windows_json(db, "--target", BOT, "--scope", "baseline-1", "--metric", "end_to_end_latency")
    assert window["count"] == len(latencies) == 12
    assert window["min"] == pytest.approx(latencies[0]) and window["max"] == pytest.approx(latencies[-1])
    assert window["mean"] == pytest.approx(sum(latencies) / 12)
    assert window["p50"] <= window["p90"] <= window["p95"] <= window["p99"]
    assert window["value"] == window["p95"], "a percentile window's value is its p95"


def test_rule_cost_tokens_and_latency_come_from_application_calls_only(collector, dataset):
    """The judge's orchestration spans (5000 tokens, $0.50, 3 retries, ending seconds after the task)
    are stored but never counted."""
    db, _ = collector
    tasks, _ = dataset
    judged = [t for t in in_scope(tasks, BOT, "challenger-1")]
    assert all(t.judge for t in judged)
    rows = {w["metric"]: w for w in windows_json(db, "--target", BOT, "--scope", "challenger-1")}
    assert rows["input_tokens"]["value"] == 800 * 6
    assert rows["retry_rate"]["value"] == 0
    assert rows["end_to_end_latency"]["max"] == pytest.approx(max((t.end_ns - t.start_ns) / S for t in judged))
    stored = meritlens("sql", "select count(*) from spans where role = 'orchestration'", "--db", str(db),
                       "--format", "json")
    assert json.loads(stored.stdout)[0]["count_star()"] == sum(t.judge for t in tasks)


def test_rule_unpriced_model_has_no_cost_never_zero(collector):
    db, _ = collector
    rows = {w["metric"]: w for w in windows_json(db, "--target", BOT, "--scope", "challenger-1")}
    # challenger ticket 4 ran on an unpriced model: 5 of 6 tasks carry a cost, none is $0
    assert rows["total_task_cost"]["sample_count"] == 5
    assert rows["total_task_cost"]["value"] == pytest.approx(0.005)
    assert rows["total_task_cost"]["min"] > 0


def test_rule_completed_task_supplies_no_quality_score(collector, dataset):
    db, _ = collector
    tasks, _ = dataset
    baseline = in_scope(tasks, BOT, "baseline-1")
    rows = {w["metric"]: w for w in windows_json(db, "--target", BOT, "--scope", "baseline-1")}
    assert rows["end_to_end_latency"]["sample_count"] == 12, "every completed task advances the counts"
    assert rows["task_quality"]["sample_count"] == sum(t.quality is not None for t in baseline) == 10
    assert rows["task_success"]["sample_count"] == 11


def test_rule_tool_use_needs_tool_spans(collector):
    """Tool calls the model requested are not evidence of tool-use performance; tool spans are."""
    db, _ = collector
    (router,) = windows_json(db, "--target", "router/classify", "--metric", "tool_use_performance")
    assert router["state"] == "not_applicable" and router["value"] is None and router["sample_count"] == 0
    (unassessed_only,) = windows_json(db, "--target", BOT, "--scope", "all", "--metric", "tool_use_performance")
    assert unassessed_only["sample_count"] == 12  # the baseline's tool spans


def test_rule_ratio_with_zero_denominator_is_not_zero(tmp_path):
    """Outcomes and costs are known, but no task succeeded: cost per successful task has no value."""
    ids = Ids(seed=3)
    tasks = [TaskSpec("all-fail", start=i, task_id=f"t{i}", calls=[CallSpec()], success=False) for i in range(3)]
    spans = [s for t in tasks for s in t.spans(ids)]
    with running_collector(tmp_path / "zero.duckdb") as url:
        post_spans(url, spans)
        rows = {w["metric"]: w for w in windows_json(tmp_path / "zero.duckdb", "--target", "all-fail")}
    assert rows["task_success"]["value"] == 0 and rows["task_success"]["state"] == "measured"  # observed zero
    for metric in ("cost_per_successful_task",):
        assert rows[metric]["value"] is None
        assert rows[metric]["state"] == "insufficient_evidence"
        assert rows[metric]["sample_count"] == 3
    assert rows["recovery_ability"]["state"] == "insufficient_evidence"  # outcomes known, nothing to recover from
    assert rows["recovery_ability"]["value"] is None


def test_rule_windows_replace_never_add(collector, dataset):
    """The whole dataset was sent with one batch delivered twice; a second full delivery changes nothing."""
    db, url = collector
    tasks, spans = dataset
    before = windows_json(db, "--target", BOT)
    post_spans(url, spans)
    after = windows_json(db, "--target", BOT)
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        for key, value in old.items():
            if key == "computed_at":
                continue
            if isinstance(value, float):  # parallel float sums may differ in the last bit
                assert new[key] == pytest.approx(value, rel=1e-12), (old["metric"], key)
            else:
                assert new[key] == value, (old["metric"], key)
    assert {w["metric"]: w["sample_count"] for w in after if w["scope"] == "all"}["end_to_end_latency"] == 20


def test_rule_spans_fall_into_windows_by_end_time_not_arrival(tmp_path):
    """Spans that ended long ago and arrive now are placed at their own end time."""
    ids = Ids(seed=11)
    old = TaskSpec("late", start=0.0, task_id="old", calls=[CallSpec()], success=True)
    new = TaskSpec("late", start=86_400.0, task_id="new", calls=[CallSpec()], success=True)
    with running_collector(tmp_path / "late.duckdb") as url:
        post_spans(url, new.spans(ids))
        post_spans(url, old.spans(ids))  # arrives last
        (window,) = windows_json(tmp_path / "late.duckdb", "--target", "late", "--metric", "task_success")
    assert dt.datetime.fromisoformat(window["first_span_time"]).timestamp() == pytest.approx(
        min(old.app_end_times) / 1e9, abs=1e-6)
    assert dt.datetime.fromisoformat(window["last_span_time"]).timestamp() == pytest.approx(
        max(new.app_end_times) / 1e9, abs=1e-6)


def test_windows_export_as_metric_window_available_signals(collector):
    db, _ = collector
    result = meritlens("windows", "--db", str(db), "--target", BOT, "--format", "signal")
    assert result.returncode == 0, result.stderr
    signals = [json.loads(line) for line in result.stdout.splitlines()]
    assert signals and all(s["type"] == "metric_window_available" for s in signals)
    assert {s["scope"] for s in signals} == {"all", "baseline-1", "challenger-1"}
    for signal in signals:
        assert signal["evidence"]["digest"] and signal["evidence"]["uri"]
        assert signal["aggregation"] == METRICS[signal["metric"]].default_aggregation.value
        assert signal["value"] is None or math.isfinite(signal["value"])
        assert signal["state"] != WindowState.NOT_CONFIGURED.value
    success = next(s for s in signals if s["scope"] == "baseline-1" and s["metric"] == "task_success")
    assert success["sample_count"] == 11 and success["value"] == pytest.approx(9 / 11)
    assert set(success["summary"]) == {"count", "mean", "stddev", "min", "max", "p50", "p90", "p95", "p99",
                                       "quantile_error"}
    assert success["summary"]["quantile_error"] == 0.0  # 11 samples: exact


def test_tasks_view_has_one_row_per_task(collector, dataset):
    db, _ = collector
    tasks, _ = dataset
    result = meritlens("sql", "select target_id, task_key, llm_calls, input_tokens, cost_usd, outcome_success, "
                       "traces from tasks order by target_id, task_key", "--db", str(db), "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == len(tasks)
    split = next(r for r in rows if r["task_key"] == "baseline-ticket-2")
    assert split["traces"] == 2 and split["llm_calls"] == 2
    wrapped = next(r for r in rows if r["task_key"] == "baseline-ticket-1")
    assert wrapped["llm_calls"] == 2, "the @observe-style wrapper is not a call of its own"
    assert wrapped["input_tokens"] == 910 + 1200 and wrapped["cost_usd"] == pytest.approx(0.0021 + 0.003)
    unpriced = next(r for r in rows if r["task_key"] == "challenger-ticket-4")
    assert unpriced["cost_usd"] is None


def test_rule_every_window_states_its_aggregation_explicitly(collector):
    db, _ = collector
    rows = windows_json(db)
    assert rows and all(r["aggregation"] in {a.value for a in METRICS[r["metric"]].allowed_aggregations}
                        for r in rows)


def test_rule_assessment_windows_lie_inside_the_assessment_execution(collector, dataset):
    """A challenger's windows hold only its own spans: they start and end inside its execution."""
    db, _ = collector
    tasks, _ = dataset
    for scope in ("baseline-1", "challenger-1"):
        own = in_scope(tasks, BOT, scope)
        start = dt.datetime.fromtimestamp(min(t.start_ns for t in own) / 1e9, dt.UTC)
        end = dt.datetime.fromtimestamp(max(t.end_ns for t in own) / 1e9, dt.UTC)
        for window in windows_json(db, "--target", BOT, "--scope", scope):
            if window["first_span_time"] is None:
                continue
            assert start <= dt.datetime.fromisoformat(window["first_span_time"]) <= end, window["metric"]
            assert start <= dt.datetime.fromisoformat(window["last_span_time"]) <= end, window["metric"]


def multiset_digest(keys: list[str]) -> str:
    """The documented evidence digest, computed here independently of the processor: sha256 of
    'count:H:L', H and L the sums mod 2**64 of each key's md5 halves read little-endian."""
    md5s = [hashlib.md5(k.encode()).digest() for k in keys]
    high = sum(int.from_bytes(d[:8], "little") for d in md5s) % 2**64
    low = sum(int.from_bytes(d[8:], "little") for d in md5s) % 2**64
    return hashlib.sha256(f"{len(keys)}:{high:016x}:{low:016x}".encode()).hexdigest()
