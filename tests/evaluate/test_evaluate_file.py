"""`meritlens evaluate` on a DuckDB file no collector holds: windows, merging, failures, the judge."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from meritlens.analytics._evaluate import window_metric_name as W
from meritlens.instrumentation import conventions as c
from tests.evaluate.evaluate_support import TARGET, run_cli, scenario_spans, span, store_spans


def windows(db: Path) -> dict[str, dict]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cursor = con.execute("SELECT * FROM windows WHERE target_id = ? AND scope = 'all'", [TARGET])
        columns = [d[0] for d in cursor.description]
        return {row[1]: dict(zip(columns, row, strict=True)) for row in cursor.fetchall()}
    finally:
        con.close()


def digest(keys) -> str:
    """The documented evidence digest, computed independently: sha256 of 'count:H:L', H and L the
    sums mod 2**64 of each key's md5 halves read little-endian."""
    md5s = [hashlib.md5(k.encode()).digest() for k in keys]
    high = sum(int.from_bytes(d[:8], "little") for d in md5s) % 2**64
    low = sum(int.from_bytes(d[8:], "little") for d in md5s) % 2**64
    return hashlib.sha256(f"{len(md5s)}:{high:016x}:{low:016x}".encode()).hexdigest()


def key(trace: int, span_n: int) -> str:
    return f"{trace:032x}:{span_n:016x}"


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "spans.duckdb"
    store_spans(path, scenario_spans())
    return path


def test_evaluate_stores_windows_then_a_rerun_replaces_only_what_it_ran(db, tmp_path):
    run_dir = tmp_path / "run"
    first = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(run_dir),
                    "--metrics", "tool_use_performance,consistency,long_horizon_performance")
    assert first.returncode == 0, first.stderr
    stored = windows(db)
    tool = stored[W("tool_use_performance")]
    assert (tool["state"], tool["value"], tool["sample_count"], tool["unit"]) == ("measured", 0.5, 2, "ratio")
    assert tool["evidence_digest"] == digest([key(1, 2), key(3, 4)])
    assert "sidecar=" in tool["evidence_uri"] and "tool_use_performance.jsonl" in tool["evidence_uri"]
    assert (run_dir / "tool_use_performance.jsonl").exists()
    consistency = stored[W("consistency")]
    assert (consistency["state"], consistency["value"], consistency["sample_count"]) == ("measured", 0.5, 4)
    long_horizon = stored[W("long_horizon_performance")]
    assert (long_horizon["state"], long_horizon["value"], long_horizon["sample_count"]) == ("not_applicable", None, 0)
    # The processor's span windows are still there, untouched by evaluate.
    assert stored["input_tokens"]["value"] == 400
    report = json.loads((run_dir / "evaluation.json").read_text())
    assert report["metrics"]["long_horizon_performance"]["status"] == "not_applicable"
    reported = report["metrics"]["long_horizon_performance"]
    assert reported["reason"] == "no task recorded agent steps (meritlens.agent.step)"
    assert report["metrics"]["tool_use_performance"]["measurements"][0]["per_key"] == {"search": 0.5}

    # More evidence arrives; re-running one metric replaces its window and keeps the others.
    store_spans(db, [span(7, **{c.TASK_ID: "t5", c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                                c.GEN_AI_TOOL_NAME: "search"}, error=True)])
    second = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(run_dir),
                     "--metrics", "tool_use_performance")
    assert second.returncode == 0, second.stderr
    again = windows(db)
    assert again[W("tool_use_performance")]["value"] == pytest.approx(1 / 3)
    assert again[W("tool_use_performance")]["sample_count"] == 3
    assert again[W("tool_use_performance")]["computed_at"] > tool["computed_at"]
    assert again[W("consistency")] == consistency
    assert again[W("long_horizon_performance")] == long_horizon
    merged = json.loads((run_dir / "evaluation.json").read_text())
    assert set(merged["metrics"]) == {"tool_use_performance", "consistency", "long_horizon_performance"}
    assert merged["metrics"]["consistency"] == report["metrics"]["consistency"]
    assert merged["metrics"]["tool_use_performance"]["measurements"][0]["sample_count"] == 3


def test_a_metric_that_raises_is_recorded_failed_and_the_others_still_run(db, tmp_path, plugin_site):
    run_dir = tmp_path / "run"
    env = {"PYTHONPATH": str(plugin_site)}
    ok = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(run_dir),
                 "--metrics", "span_count", env=env)
    assert ok.returncode == 0, ok.stderr
    assert "metric plugin broken_metric = broken_metric:Broken skipped: failed to import" in ok.stderr
    before = windows(db)[W("span_count")]
    shown = (before["state"], before["value"], before["unit"], before["aggregation"])
    assert shown == ("measured", 6.0, "spans", "single_value")

    failed = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(run_dir),
                     "--metrics", "span_count,recovery_ability", env={**env, "MERITLENS_TEST_EXPLODE": "1"})
    assert failed.returncode == 2
    assert "Traceback" in failed.stderr and "the span counter exploded" in failed.stderr
    stored = windows(db)
    assert stored[W("span_count")] == before  # a failure is not evidence: the earlier window stays
    recovery = stored[W("recovery_ability")]
    assert (recovery["state"], recovery["value"]) == ("insufficient_evidence", 1.0)
    report = json.loads((run_dir / "evaluation.json").read_text())
    assert report["metrics"]["span_count"]["status"] == "failed"
    assert "the span counter exploded" in report["metrics"]["span_count"]["error"]
    assert report["metrics"]["recovery_ability"]["status"] == "measured"


def test_judge_calls_are_stored_as_orchestration_spans_and_never_counted(db, tmp_path):
    tokens_before = windows(db)["input_tokens"]
    result = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(tmp_path / "run"),
                     "--metrics", "task_quality,hallucination_rate", "--judge", "fake:fake-judge-2025-01-01",
                     "--judge-replicas", "2")
    assert result.returncode == 0, result.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        judge_spans = con.execute(
            "SELECT role, request_model, target_id, task_id, input_tokens FROM spans WHERE role = 'orchestration'"
        ).fetchall()
        evaluators = con.execute(
            "SELECT json_extract_string(attributes, '$.\"meritlens.evaluator\"') AS m, count(*) FROM spans"
            " WHERE role = 'orchestration' GROUP BY m ORDER BY m").fetchall()
    finally:
        con.close()
    assert len(judge_spans) == 4 * 2 * 2  # tasks x replicas x judge-driven metrics
    assert {(r[0], r[1], r[2]) for r in judge_spans} == {("orchestration", "fake-judge-2025-01-01", TARGET)}
    assert all(r[4] and r[4] > 0 for r in judge_spans)
    assert evaluators == [("hallucination_rate", 8), ("task_quality", 8)]
    stored = windows(db)
    assert stored["input_tokens"]["value"] == tokens_before["value"] == 400
    assert stored["input_tokens"]["evidence_digest"] == tokens_before["evidence_digest"]
    quality = stored[W("task_quality")]
    assert quality["state"] == "measured" and quality["sample_count"] == 4
    assert "judge=fake-judge-2025-01-01" in quality["evidence_uri"]
    report = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert report["metrics"]["task_quality"]["judge_model"] == "fake-judge-2025-01-01"
    assert report["metrics"]["task_quality"]["judge_fake"] is True
    assert "judge: fake-judge-2025-01-01 (fake" in result.stdout


def test_an_assessment_scope_and_the_default_run_directory(db, tmp_path):
    result = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--scope", "arm-a",
                     "--metrics", "tool_use_performance", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "meritlens-runs" / "shop-bot%2Fanswer" / "arm-a"
    assert (run_dir / "evaluation.json").exists()
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT value, sample_count FROM windows WHERE metric = ? AND scope = 'arm-a'",
                          [W("tool_use_performance")]).fetchone()
    finally:
        con.close()
    assert row == (0.5, 2)


def test_errors_are_clear_and_write_nothing(db, tmp_path):
    unknown = run_cli("evaluate", "--db", str(db), "--target", TARGET, "--metrics", "tool_use_perf")
    assert unknown.returncode == 2 and "did you mean 'tool_use_performance'" in unknown.stderr
    nothing = run_cli("evaluate", "--db", str(db), "--target", "no-such-target", "--run-dir", str(tmp_path / "r"))
    assert nothing.returncode == 2 and "no application spans for target 'no-such-target'" in nothing.stderr
    missing = run_cli("evaluate", "--db", str(tmp_path / "absent.duckdb"), "--target", TARGET)
    assert missing.returncode == 2 and "no database at" in missing.stderr
    assert not (tmp_path / "absent.duckdb").exists()
    assert W("tool_use_performance") not in windows(db)


def test_observations_command_reads_the_sidecar_back(db, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli("evaluate", "--db", str(db), "--target", TARGET, "--run-dir", str(run_dir),
                   "--metrics", "tool_use_performance").returncode == 0
    with (run_dir / "tool_use_performance.jsonl").open("a") as fh:
        fh.write('{"tool": "search", "outcome": "ok"}\n')
    result = run_cli("observations", "tool_use_performance", "--run-dir", str(run_dir), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"keys": {"tool": "search", "outcome": "Timeout"}, "value": 1.0},
        {"keys": {"tool": "search", "outcome": "ok"}, "value": 1.0},
    ]
    assert "skipping malformed row" in result.stderr and "tool_use_performance.jsonl:3" in result.stderr


def test_metrics_command_lists_builtins_and_plugins(plugin_site):
    result = run_cli("metrics", env={"PYTHONPATH": str(plugin_site)})
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("\t")[:2] for line in result.stdout.splitlines())
    assert lines["task_quality"] == "built-in"
    assert lines["span_count"] == "plugin span_count_metric:SpanCountMetric"
    assert "broken_metric" not in lines
    assert "refused: broken_metric = broken_metric:Broken: failed to import: ModuleNotFoundError" in result.stderr
