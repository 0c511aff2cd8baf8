"""`GET /metrics`: the windows and the collector's health in Prometheus' format, scraped by a real
Prometheus server whose own query API then gives the windows' values; the documented alert rules
load and fire."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from meritlens.collector._settings import DEFAULT_MEMORY_LIMIT, MemoryBudget
from meritlens.instrumentation import conventions as c
from tests.collector.dashboard_spans import T0, TARGET, XSS_TARGET, known_spans, post
from tests.collector.prometheus_proc import PROMTOOL, PrometheusProcess
from tests.conftest import CollectorProcess
from tests.otlp_builders import make_request, make_span

DOCS = Path(__file__).resolve().parents[3] / "docs" / "prometheus.md"
PROFILE = """
target = "support-bot/answer"

[metrics.end_to_end_latency]
direction = "lower"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "percentile"
min_samples = 5
constraint = 2.0
rationale = "p95 over the set, at most two seconds"

[metrics.input_tokens]
direction = "lower"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "sum"
min_samples = 5
constraint = 1000
rationale = "every task of the set"

[metrics.task_success]
direction = "higher"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "rate"
min_samples = 5
rationale = "graded outcomes"
"""


def _samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _window_key(name: str, metric: str, aggregation: str, target: str = TARGET, scope: str = "all") -> tuple:
    labels = {"target": target, "metric": metric, "scope": scope, "aggregation": aggregation}
    return (name, tuple(sorted(labels.items())))


def _scrape(collector) -> dict[tuple, float]:
    response = httpx.get(collector.url + "/metrics", headers=collector.headers())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return _samples(response.text)


def _until(collector, check, timeout: float = 30.0) -> dict:
    """Scrape until ``check(samples)`` holds: staged spans reach the span table within about a second."""
    deadline = time.monotonic() + timeout
    while True:
        samples = _scrape(collector)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, samples
        time.sleep(0.2)


def test_metrics_give_each_measured_window_and_the_collectors_health(collector):
    known_spans(collector)
    samples = _scrape(collector)
    rows = collector.sql(f"select * from windows where target_id = '{TARGET}' and scope = 'all'")
    windows = {r["metric"]: r for r in rows}
    assert samples[_window_key("meritlens_window_tokens", "input_tokens", "sum")] == windows["input_tokens"]["value"]
    assert windows["input_tokens"]["value"] == 500
    assert samples[_window_key("meritlens_window_usd", "total_task_cost", "sum")] == pytest.approx(0.10)
    assert samples[_window_key("meritlens_window_seconds", "end_to_end_latency", "percentile")] == pytest.approx(4.8)
    assert samples[_window_key("meritlens_window_samples", "total_task_cost", "sum")] == 4
    # A window that is not measured has no value series (never 0), and says so.
    assert not any(name.startswith("meritlens_window_") and dict(labels).get("metric") == "output_tokens"
                   and name not in ("meritlens_window_samples", "meritlens_window_measured")
                   for name, labels in samples)
    assert samples[_window_key("meritlens_window_measured", "output_tokens", "sum")] == 0
    assert samples[_window_key("meritlens_window_measured", "input_tokens", "sum")] == 1
    assert samples[_window_key("meritlens_window_measured", "end_to_end_latency", "percentile", target=XSS_TARGET)] == 0
    assert _window_key("meritlens_window_tokens", "input_tokens", "sum", scope="a1") in samples

    # Health: 7 spans received and stored; the same request again is acknowledged but stored once.
    request = make_request([make_span({c.TARGET_ID: "dup-bot", c.GEN_AI_USAGE_INPUT_TOKENS: 1}, start_ns=T0 + i)
                            for i in range(3)]).SerializeToString()
    for _ in range(2):
        assert httpx.post(collector.traces_url, content=request,
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    # one valid span and one with an all-zero trace id, refused one by one
    post(collector, [make_span({c.TARGET_ID: "dup-bot"}, start_ns=T0), make_span({}, trace_id=bytes(16))])
    samples = _until(collector, lambda s: s[("meritlens_spans_duplicates_dropped_total", ())] == 3)
    assert samples[("meritlens_spans_received_total", ())] == 7 + 6 + 2
    assert samples[("meritlens_spans_accepted_total", ())] == 7 + 6 + 1
    assert samples[("meritlens_spans_stored_total", ())] == 7 + 3 + 1
    assert samples[("meritlens_spans_refused_total", (("reason", "invalid"),))] == 1
    assert samples[("meritlens_spans_refused_total", (("reason", "overloaded"),))] == 0
    assert samples[("meritlens_staging_rows", ())] == 0
    assert samples[("meritlens_span_write_duration_seconds_count", ())] >= 1
    assert ("meritlens_window_lag_rows", ()) in samples
    # the bounded parts of the memory budget, each inside its share and none missing
    parts = {dict(labels)["part"]: value for (name, labels), value in samples.items()
             if name == "meritlens_memory_part_bytes"}
    budget = MemoryBudget.of(DEFAULT_MEMORY_LIMIT)
    shares = {"duckdb": budget.duckdb, "window_state": budget.window_state, "key_locator": budget.span_index,
              "seen_keys": budget.key_filter}
    assert parts.keys() == shares.keys()
    assert all(0 < parts[p] <= shares[p] for p in shares), (parts, shares)


def test_too_many_spans_in_one_request_are_counted_as_refused(tmp_path):
    with CollectorProcess(tmp_path / "m.duckdb", args=("--max-spans-per-request", "2", "--no-grpc")) as collector:
        r = httpx.post(collector.url + "/v1/traces", content=make_request(
            [make_span({c.TARGET_ID: "t"}) for _ in range(3)]).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 413
        samples = _scrape(collector)
        assert samples[("meritlens_spans_refused_total", (("reason", "too_many_spans"),))] == 3
        assert samples[("meritlens_spans_received_total", ())] == 3
        assert samples[("meritlens_spans_accepted_total", ())] == 0


def _documented(kind: str) -> str:
    """The YAML block of docs/prometheus.md holding ``kind`` (scrape_configs or groups)."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    [block] = [b for b in blocks if b.lstrip().startswith(kind) or f"\n{kind}:" in b]
    return block


def test_the_documented_alert_rules_are_valid(tmp_path):
    rules = tmp_path / "meritlens-rules.yml"
    rules.write_text(_documented("groups"))
    proc = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SUCCESS: 2 rules found" in proc.stdout, proc.stdout + proc.stderr


def test_a_prometheus_server_scrapes_the_windows_and_the_rules_fire(tmp_path):
    """Prometheus scrapes a collector that wants a token, with the documented scrape config and rules;
    its query API gives the windows' values, and both alerts are pending."""
    profile = tmp_path / "support.toml"
    profile.write_text(PROFILE)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    collector = CollectorProcess(tmp_path / "meritlens.duckdb", token="s3cret-token",
                                 args=("--token-file", str(token_file), "--profile", str(profile), "--no-grpc")).start()
    try:
        with collector.client() as client:
            known = []
            for i, seconds in enumerate((1.0, 2.0, 3.0, 4.0, 5.0)):
                known.append(make_span({c.TARGET_ID: TARGET, c.GEN_AI_USAGE_INPUT_TOKENS: 100, c.COST_USD: 0.01},
                                       start_ns=T0 + i * 60 * 10**9, duration_s=seconds))
            r = client.post("/v1/traces", content=make_request(known).SerializeToString(),
                            headers={"Content-Type": "application/x-protobuf"})
            assert r.status_code == 200
        assert httpx.get(collector.url + "/metrics").status_code == 401  # same token rules as every endpoint

        rules = tmp_path / "meritlens-rules.yml"
        rules.write_text(_documented("groups").replace("for: 15m", "for: 10m"))
        scrape = (_documented("scrape_configs")
                  .replace("127.0.0.1:4318", f"127.0.0.1:{collector.http_port}")
                  .replace("scrape_interval: 15s", "scrape_interval: 1s")
                  .replace("/etc/prometheus/meritlens.token", str(token_file))
                  .replace("/etc/prometheus/meritlens-rules.yml", str(rules)))
        with PrometheusProcess(tmp_path / "prometheus", scrape) as prometheus:
            prometheus.wait_for('up{job="meritlens"} == 1')
            with collector.client() as client:
                body = client.post("/api/sql", json={"sql": f"select metric, value from windows where target_id = "
                                                            f"'{TARGET}' and scope = 'all'"}).json()
            windows = {metric: {"value": value} for metric, value in body["rows"]}
            [latency] = prometheus.wait_for(
                f'meritlens_window_seconds{{target="{TARGET}", metric="end_to_end_latency", scope="all"}}')
            assert latency["metric"]["aggregation"] == "percentile"
            assert float(latency["value"][1]) == pytest.approx(windows["end_to_end_latency"]["value"])
            assert float(latency["value"][1]) == pytest.approx(4.8)
            [tokens] = prometheus.wait_for(f'meritlens_window_tokens{{target="{TARGET}", metric="input_tokens"}}')
            assert float(tokens["value"][1]) == windows["input_tokens"]["value"] == 500
            [cost] = prometheus.wait_for(f'meritlens_window_usd{{target="{TARGET}", metric="total_task_cost"}}')
            assert float(cost["value"][1]) == pytest.approx(windows["total_task_cost"]["value"])
            [samples] = prometheus.wait_for(f'meritlens_window_samples{{target="{TARGET}", metric="input_tokens"}}')
            assert samples["value"][1] == "5"
            [received] = prometheus.wait_for("meritlens_spans_received_total")
            assert received["value"][1] == "5"
            assert prometheus.wait_for('meritlens_window_ratio{metric="task_success"}', lambda r: True) == []

            # The profile: task_success has no live collector; p95 latency 4.8 s is above its 2 s
            # constraint; input tokens (500) are within theirs.
            covered = {r["metric"]["metric"]: r["value"][1] for r in prometheus.wait_for(
                "meritlens_profile_metric_covered", lambda r: len(r) == 3)}
            assert covered == {"end_to_end_latency": "1", "input_tokens": "1", "task_success": "0"}
            within = {r["metric"]["metric"]: r["value"][1] for r in prometheus.wait_for(
                "meritlens_profile_metric_within_constraint", lambda r: len(r) == 2)}
            assert within == {"end_to_end_latency": "0", "input_tokens": "1"}

            def pending(result) -> bool:
                return {(a["labels"]["alertname"], a["labels"]["metric"], a["state"]) for a in result} == {
                    ("MeritlensRequiredMetricNotLive", "task_success", "pending"),
                    ("MeritlensWindowOutsideProfile", "end_to_end_latency", "pending")}

            deadline = time.monotonic() + 60
            while not pending(alerts := prometheus.api("alerts")["alerts"]):
                assert time.monotonic() < deadline, alerts
                time.sleep(0.3)
            assert all(a["labels"]["target"] == TARGET and a["labels"]["profile"] == "support" for a in alerts)
    finally:
        collector.stop()
