"""`meritlens regressions`, its dashboard panels, its `/metrics` gauges and `profile check --detect`,
end to end: spans with explicit timestamps sent by the real OpenTelemetry exporter to the real
collector, answered from its windows by time (through it, then from the file it leaves).

Targets, each task one call (its latency the call's duration):
- ``bot``: 150 tasks spread over the 100 hours that end 30 hours ago, then 150 tasks in the last
  two hours twice as slow; tokens and outcomes follow the same cycle on both sides;
- ``quiet``: the same baseline, then a handful of slow tasks (below its profile's min_samples);
- ``cyclic``: a daily cycle: fast tasks in the hours of the day the recent range covers (today and
  the days before), slow ones twelve hours away from them.
"""

from __future__ import annotations

import datetime as _dt
import json
import time

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client.parser import text_string_to_metric_families

from meritlens.instrumentation import conventions as c
from tests.browser import dump_dom, parse_dom, squash
from tests.conftest import CollectorProcess, run_cli

H_NS = 3600 * 10**9
PROFILE = """
target = "{target}"

[metrics.end_to_end_latency]
direction = "lower"
strategy = "representative_task_set"
cases = 40
repetitions = 1
aggregation = "percentile"
min_samples = 30
rationale = "the p95 of forty tasks"

[metrics.task_success]
direction = "higher"
strategy = "representative_task_set"
cases = 40
repetitions = 1
aggregation = "rate"
min_samples = 30
rationale = "one run per ticket"

[metrics.task_quality]
direction = "higher"
strategy = "representative_task_set"
cases = 40
repetitions = 1
aggregation = "mean"
min_samples = 30
rationale = "judged by the evaluator"
"""


def _tasks(now_ns: int) -> list[tuple[str, int, float, int]]:
    """(target, end, seconds, index) of every task (see the module)."""
    tasks = []
    for target in ("bot", "quiet"):
        tasks += [(target, now_ns - 30 * H_NS - i * (100 * H_NS // 150), 1.0 + (i % 15) / 30, i) for i in range(150)]
    tasks += [("bot", now_ns - 60 * 10**9 - i * (2 * H_NS // 150), 2 * (1.0 + (i % 15) / 30), i) for i in range(150)]
    tasks += [("quiet", now_ns - 60 * 10**9 - i * 10**10, 3.0, i) for i in (2, 6, 9, 13, 17)]  # tokens as before
    for day in range(3):
        for i in range(120):
            end = now_ns - day * 24 * H_NS - 60 * 10**9 - i * (2 * H_NS // 120)
            tasks.append(("cyclic", end, 1.0 + (i % 10) / 20, i))
            if day:
                tasks.append(("cyclic", end - 12 * H_NS, 3.0 + (i % 10) / 20, i))
    return tasks


def _send(collector, now_ns: int) -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=collector.traces_url)))
    tracer = provider.get_tracer("tests")
    for target, end, seconds, i in _tasks(now_ns):
        span = tracer.start_span("chat m", start_time=end - int(seconds * 1e9), attributes={
            c.TARGET_ID: target, c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 100 + i % 20,
            c.OUTCOME_SUCCESS: i % 10 != 0})
        span.end(end_time=end)
    assert provider.force_flush()
    provider.shutdown()


@pytest.fixture(scope="module")
def sent_at_ns() -> int:
    """The instant the tasks' times are counted back from."""
    return time.time_ns()


@pytest.fixture(scope="module")
def served(tmp_path_factory, sent_at_ns):
    """A collector holding every target's spans, with the quiet target's profile loaded."""
    folder = tmp_path_factory.mktemp("regressions")
    profile = folder / "quiet.toml"
    profile.write_text(PROFILE.format(target="quiet"))
    collector = CollectorProcess(folder / "meritlens.duckdb", ("--profile", str(profile))).start()
    try:
        _send(collector, sent_at_ns)
        total = 2 * 150 + 150 + 5 + 3 * 120 + 2 * 120
        assert collector.sql("select count(*) as n from spans")[0]["n"] == total
        yield collector, profile
    finally:
        collector.stop()


def _report(*args: str, code: int) -> dict:
    done = run_cli("regressions", "--format", "json", *args, check=False)
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout)


def _verdicts(report: dict, target: str) -> dict[str, str]:
    return {r["metric"]: r["verdict"] for r in report["regressions"] if r["target"] == target}


def _recent_ends(report: dict, sent_at_ns: int, target: str) -> list[int]:
    """The ends (ns) of the tasks of ``target`` in the report's recent range: within the first minute of an
    hour the newest tasks still end in the hour before, so the range holds one hour of them fewer."""
    start, end = (int(_dt.datetime.fromisoformat(report["recent"][k]).timestamp()) * 10**9 for k in ("from", "to"))
    return [t for name, t, _, _ in _tasks(sent_at_ns) if name == target and start <= t < end]


def test_an_injected_latency_regression_is_worse_on_latency_and_no_change_elsewhere(served, sent_at_ns):
    collector, _ = served
    report = _report("--url", collector.url, "--target", "bot", "--recent", "3h", code=1)
    assert _verdicts(report, "bot") == {"task_success": "no_change", "input_tokens": "no_change",
                                        "end_to_end_latency": "worse"}
    latency = next(r for r in report["regressions"] if r["metric"] == "end_to_end_latency")
    assert (latency["statistic"], latency["method"], latency["unit"]) == ("p95", "order_statistics_mover", "s")
    recent = _recent_ends(report, sent_at_ns, "bot")
    assert latency["recent_samples"] == len(recent) >= 145 and latency["baseline_samples"] == 150
    assert 0 < latency["difference"]["low"] <= latency["difference"]["value"] <= latency["difference"]["high"]
    assert latency["relative"]["value"] == pytest.approx(1.0, abs=0.05)  # twice as slow
    # one family: the three comparisons of the target, each interval at the Bonferroni level
    assert (report["family_size"], report["correction"], report["confidence"]) == (3, "bonferroni", 0.95)
    assert report["interval_confidence"] == pytest.approx(1 - 0.05 / 3)
    assert {r["confidence"] for r in report["regressions"]} == {report["interval_confidence"]}
    assert report["not_compared"] == [{"target": "bot", "metric": "throughput",
                                       "reason": "its value is not a statistic of its samples"}]
    assert (report["worse"], report["better"], report["same_hours"]) == (1, 0, False)
    assert report["recent_buckets"] == len({t // H_NS for t in recent}) >= 2
    assert report["baseline_buckets"] >= 90
    # every metric of every target: the family grows, and the text says so, with units
    done = run_cli("regressions", "--url", collector.url, "--recent", "3h", check=False)
    assert done.returncode == 1, done.stderr
    assert "comparisons at 95% together (bonferroni: each interval at" in done.stdout
    assert "worse: bot end_to_end_latency" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("bot") and "end_to_end_latency" in x)
    assert " s " in line and "worse" in line and "150 / 150" in line


def test_a_handful_of_slow_tasks_under_min_samples_is_not_enough_samples(served):
    collector, profile = served
    report = _report("--url", collector.url, "--profile", str(profile), "--recent", "3h", code=0)
    assert {r["target"] for r in report["regressions"]} == {"quiet"}  # the profile's target
    latency = next(r for r in report["regressions"] if r["metric"] == "end_to_end_latency")
    assert (latency["verdict"], latency["min_samples"], latency["recent_samples"]) == ("not_enough_samples", 30, 5)
    assert latency["reason"] == "the recent range has 5 samples; 30 are needed" and latency["difference"] is None
    assert report["worse"] == 0
    # without the profile the same five are compared (min_samples 2), in a family of the target's metrics
    bare = _report("--url", collector.url, "--target", "quiet", "--recent", "3h", code=1)
    assert _verdicts(bare, "quiet")["end_to_end_latency"] == "worse"


def test_same_hours_compares_with_the_same_hours_of_the_baseline_days(served):
    collector, _ = served
    common = ("--url", collector.url, "--target", "cyclic", "--recent", "3h", "--baseline", "2d")
    same = _report(*common, "--same-hours", code=0)
    assert same["same_hours"] is True and len(same["baseline"]) == 2
    assert _verdicts(same, "cyclic")["end_to_end_latency"] == "no_change"
    assert [r["baseline_samples"] for r in same["regressions"] if r["metric"] == "end_to_end_latency"] == [240]
    # against the whole two days before, the slow hours of the cycle (yesterday's) make today look better
    whole = _report(*common, code=0)
    assert _verdicts(whole, "cyclic")["end_to_end_latency"] == "better"
    assert [r["baseline_samples"] for r in whole["regressions"] if r["metric"] == "end_to_end_latency"] == [360]


@pytest.mark.parametrize("args, message", [
    (("--recent", "2x"), "'2x' is not a duration"),
    (("--same-hours", "--recent", "2d"), "same hours compares hours of the day"),
    (("--same-hours", "--baseline", "36h"), "with same hours the baseline is whole days"),
    (("--confidence", "1.5"), "a confidence lies strictly between 0 and 1"),
    (("--target", "nobody"), "no window by time holds samples of nobody"),
])
def test_bad_input_is_exit_2_with_one_line_naming_it(served, args, message):
    collector, _ = served
    done = run_cli("regressions", "--url", collector.url, *args, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("path, body, message", [
    ("/api/regressions", {"recent_us": -5}, "recent_us is a positive whole number of µs, not -5"),
    ("/api/regressions", {"confidence": 2}, "confidence is a number strictly between 0 and 1, not 2"),
    ("/api/regressions", {"profile": {"target": "x"}}, "metrics: must hold at least one [metrics.<id>] table"),
    ("/api/regressions", [], "a question is a JSON object, not list"),
    ("/api/regressions/plans", {"detect": 0.1}, "a plan needs the profile"),
])
def test_the_routes_refuse_a_bad_question_naming_what_is_wrong(served, path, body, message):
    collector, _ = served
    response = httpx.post(collector.url + path, json=body)
    assert response.status_code == 400 and message in response.json()["error"], response.text


def test_the_dashboard_shows_regressions_on_the_overview_and_the_target_page(served, tmp_path):
    collector, _ = served
    overview = httpx.get(collector.url + "/api/dashboard/overview").json()
    rows = {r["target_id"]: r["regressions"] for r in overview["targets"]}
    assert rows["bot"]["worse"] == ["end_to_end_latency"] and rows["quiet"]["worse"] == []
    assert overview["regressions"]["correction"] == "bonferroni"

    dom = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium"))
    card = dom.find("div", data_callout="regressions")
    assert card.attrs["data-verdict"] == "not-ready"
    assert squash(card.find("div", class_="callout-body").text) == "bot (end_to_end_latency)"
    assert "bonferroni" in card.find("div", class_="callout-note").text
    table = dom.find("table", id="overview-table")
    assert squash(table.find("tr", data_target="bot").find("td", data_col="regressions").text) == "1 worse"
    assert squash(table.find("tr", data_target="quiet").find("td", data_col="regressions").text) == "no change"

    page = parse_dom(dump_dom(f"{collector.url}/?refresh=0&view=target&target=bot", tmp_path / "chromium"))
    panel = page.find("div", id="regressions")
    assert "comparisons at 95% together (bonferroni" in panel.find("div", class_="caption").text
    latency = panel.find("tr", data_regression="end_to_end_latency")
    assert latency.attrs["data-verdict"] == "worse"
    assert latency.find("span", class_="verdict").text == "worse"
    assert latency.find("td", data_col="samples").text == "150 / 150"
    change = squash(latency.find("td", data_col="change").text)
    assert change.startswith("+") and change.count(" s") == 3  # the estimate and both bounds, in seconds
    assert panel.find("tr", data_regression="input_tokens").attrs["data-verdict"] == "no_change"
    # the quiet target's profile (serve --profile) asks for 30 samples: five slow tasks are not enough
    quiet = parse_dom(dump_dom(f"{collector.url}/?refresh=0&view=target&target=quiet", tmp_path / "chromium"))
    row = quiet.find("div", id="regressions").find("tr", data_regression="end_to_end_latency")
    assert row.attrs["data-verdict"] == "not_enough_samples"
    assert row.find("td", data_col="change").find("span", data_missing="true")  # no interval: shown missing


def test_metrics_export_each_regression_verdict_and_change(served):
    collector, _ = served
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(collector.url + "/metrics").text)}
    verdicts = {(s.labels["target"], s.labels["metric"], s.labels["verdict"]): s.value
                for s in families["meritlens_regression_verdict"].samples}
    assert verdicts[("bot", "end_to_end_latency", "worse")] == 1
    assert verdicts[("bot", "end_to_end_latency", "no_change")] == 0
    assert verdicts[("bot", "input_tokens", "no_change")] == 1
    assert verdicts[("quiet", "end_to_end_latency", "not_enough_samples")] == 1
    bounds = {s.labels["bound"]: s.value for s in families["meritlens_regression_change_seconds"].samples
              if (s.labels["target"], s.labels["metric"]) == ("bot", "end_to_end_latency")}
    assert 0 < bounds["low"] <= bounds["estimate"] <= bounds["high"]
    # no interval, no change series: missing is never zero
    assert not [s for s in families["meritlens_regression_change_seconds"].samples if s.labels["target"] == "quiet"]
    assert 0.95 < families["meritlens_regression_interval_confidence"].samples[0].value < 1


def test_on_the_file_the_collector_leaves_the_same_report_and_plans_from_it(served):
    """Last in this file: stops the collector, then reads its DuckDB file."""
    collector, profile = served
    through = _report("--url", collector.url, "--target", "bot", "--recent", "3h", code=1)
    collector.stop()
    db = str(collector.db)
    on_file = _report("--db", db, "--target", "bot", "--recent", "3h", code=1)
    assert on_file["regressions"] == through["regressions"]

    bot_profile = profile.parent / "bot.toml"
    bot_profile.write_text(PROFILE.format(target="bot"))
    done = run_cli("profile", "check", str(bot_profile), "--db", db, "--detect", "10%", check=False)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "samples per side to detect a 10% change in the bad direction with power 0.8, at 95% over the 2" in text
    rows = {line.split()[0]: line for line in text.split("samples needed")[1].splitlines()[1:] if line.strip()}
    assert "two_proportions_normal" in rows["task_success"] and "90%" in rows["task_success"]
    assert "simulation_order_statistics" in rows["end_to_end_latency"]
    assert "no stored distribution to plan from" in rows["task_quality"]
    needed = int(rows["task_success"].split()[4].replace(",", ""))
    assert 200 < needed < 500  # 90% to 81% at 97.5% (two metrics) with power 0.8: about 290
    alone = run_cli("profile", "check", str(bot_profile), "--db", str(profile.parent / "absent.duckdb"),
                    "--detect", "10%", check=False)
    assert alone.returncode == 2 and "absent.duckdb" in alone.stderr


def test_a_collector_writing_to_a_lake_says_where_the_windows_by_time_are(tmp_path):
    from tests.collector.lake.lake_helpers import lake_collector, post, varied_spans

    collector = lake_collector(tmp_path, tmp_path / "lake", "c0", "--stage-seconds", "0.2").start()
    try:
        assert post(collector.url, varied_spans(range(1))[0]).status_code == 200
        assert httpx.get(collector.url + "/api/dashboard/regressions").json()["available"] is False
        assert "meritlens_regression" not in httpx.get(collector.url + "/metrics").text
        done = run_cli("regressions", "--url", collector.url, check=False)
        assert done.returncode == 2 and "keeps no windows by time" in done.stderr and "--lake" in done.stderr
        page = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium"))
        assert page.find("div", data_callout="regressions").find("span", data_missing="true")
    finally:
        collector.stop()
