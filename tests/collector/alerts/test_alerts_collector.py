"""Alert rules of a profile evaluated by the real collector as its windows update, delivered to a real
webhook receiver (aiohttp) and scraped by the real Prometheus server: a handful of slow spans under the
minimum does not fire; an injected latency shift does, is delivered with retries while the receiver
fails, keeps its one event id across a collector restart, and resolves; a regression against the
baseline range fires; a target that stops sending fires its no-data rule; silencing holds deliveries
back and `meritlens alerts` exits 0/1/2 as documented."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from meritlens.instrumentation import conventions as c
from tests.browser import dump_dom, parse_dom, squash
from tests.cli_runner import run_cli
from tests.collector.alerts.webhook_receiver import WebhookReceiver
from tests.collector.prometheus_proc import PROMTOOL, PrometheusProcess
from tests.conftest import CollectorProcess

HOUR_NS = 3600 * 10**9
SECRET = b"a webhook key \x00 of any bytes"
_PLAN = """
[metrics.end_to_end_latency]
direction = "lower"
strategy = "load_test"
cases = 1
repetitions = 500
aggregation = "percentile"
min_samples = 30
constraint = 1.0
rationale = "every request of the service"
"""


DOC = Path(__file__).resolve().parents[3] / "docs" / "alerts.md"


def documented(language: str, holding: str) -> str:
    """The fenced ``language`` block of docs/alerts.md that holds ``holding``."""
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    return next(b for b in blocks if holding in b)


def documented_verify():
    namespace: dict = {}
    exec(documented("python", "def verify"), namespace)  # noqa: S102 - the documented receiver's check
    return namespace["verify"]


def range_with_room(minimum_s: int = 900) -> str:
    """A rule range (whole hours) whose current range has ``minimum_s`` left, so that the test's spans
    stay in one sequence of the rule (a new range starts a new one)."""
    now_s = time.time()
    for hours in (720, 7, 11, 13):
        if hours * 3600 - now_s % (hours * 3600) >= minimum_s:
            return f"{hours}h"
    raise AssertionError("unreachable: the ranges' ends are hours apart")


def profile(path: Path, target: str, rules: str) -> Path:
    path.write_text(f'target = "{target}"\n{_PLAN}\n{rules}')
    return path


def serve_args(profile_path: Path, secret_file: Path, receiver: WebhookReceiver) -> tuple[str, ...]:
    return ("--no-grpc", "--profile", str(profile_path), "--alert-webhook-url", receiver.url,
            "--alert-webhook-secret-file", str(secret_file), "--alert-interval", "0.3", "--alert-retry", "0.2")


class Sender:
    """The real OpenTelemetry SDK and OTLP/HTTP exporter: calls of a given latency ending when asked."""

    def __init__(self, collector: CollectorProcess):
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=collector.traces_url)))
        self.tracer = self.provider.get_tracer("tests")

    def calls(self, target: str, count: int, seconds: float, end_ns: int | None = None) -> None:
        end_ns = end_ns or time.time_ns()
        for i in range(count):
            end = end_ns - i * 1000
            self.tracer.start_span("chat m", attributes={c.TARGET_ID: target},
                                   start_time=end - int(seconds * 1e9)).end(end_time=end)
        assert self.provider.force_flush(30_000)

    def close(self) -> None:
        self.provider.shutdown()


def states(collector: CollectorProcess) -> dict[str, dict]:
    with collector.client(timeout=30) as client:
        body = client.get("/api/alerts").json()
    return {s["rule"]: s for s in body["alerts"]}


def wait_state(collector: CollectorProcess, rule: str, check, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = states(collector)[rule]
        if check(state):
            return state
        assert time.monotonic() < deadline, f"{rule}: {state}\n{collector.log()[-4000:]}"
        time.sleep(0.2)


def fired_and_resolved(requests: list[dict], rule: str) -> tuple[set, set]:
    fired = {r["event_id"] for r in requests if r["body"]["rule"] == rule and r["body"]["state"] == "fired"}
    resolved = {r["event_id"] for r in requests if r["body"]["rule"] == rule and r["body"]["state"] == "resolved"}
    return fired, resolved


def test_a_latency_alert_waits_for_evidence_is_retried_survives_a_restart_and_resolves(tmp_path):
    rules = f"""
[[alerts]]
name = "median-latency"
kind = "constraint"
metric = "end_to_end_latency"
quantile = 0.5
range = "{range_with_room()}"
"""
    secret_file = tmp_path / "webhook.key"
    secret_file.write_bytes(SECRET + b"\n")
    path = profile(tmp_path / "bot.toml", "bot", rules)
    with WebhookReceiver(SECRET, refuse=None) as receiver:
        collector = CollectorProcess(tmp_path / "m.duckdb", args=serve_args(path, secret_file, receiver)).start()
        sender = Sender(collector)
        try:
            # a handful of slow calls: evaluated, but under min_samples nothing fires
            sender.calls("bot", 5, 3.0)
            state = wait_state(collector, "median-latency", lambda s: s["samples"] == 5)
            assert state["status"] == "ok" and state["evidence"] == "not_enough_samples"
            assert run_cli("alerts", "--url", collector.url, check=False).returncode == 0
            # the latency shift, with evidence: fires; the failing receiver gets the same event again and again
            sender.calls("bot", 75, 3.0)
            state = wait_state(collector, "median-latency", lambda s: s["status"] == "firing")
            assert state["evidence"] == "wrong_side" and state["bound"] > 1.0 and state["samples"] == 80
            attempts = receiver.wait_for(lambda rs: [r for r in rs if r["body"]["rule"] == "median-latency"]
                                         if len(rs) >= 3 else None)
            event_id = attempts[0]["event_id"]
            assert {r["event_id"] for r in attempts} == {event_id} and all(r["status"] == 503 for r in attempts)
            body = attempts[0]["body"]
            assert attempts[0]["signed"] and body["event_id"] == event_id and body["state"] == "fired"
            assert body["target"] == "bot" and body["metric"] == "end_to_end_latency" and body["samples"] == 80
            assert body["confidence"] == 0.95 and body["method"] == "quantile_confidence_sequence"
            assert body["value"] == pytest.approx(3.0, rel=0.02) and body["bound"] > body["threshold"] == 1.0
            window = body["evidence"]["windows"][0]
            assert window["samples"] == 80 and window["digest"] and window["uri"].startswith("meritlens://")
            assert window["spans"].startswith(collector.url + "/?view=traces&target=bot")
            assert [r["sample_count"] for r in collector.sql(window["sql"])] and sum(
                r["sample_count"] for r in collector.sql(window["sql"])) == 80
            listed = run_cli("alerts", "--url", collector.url, "--json", check=False)
            assert listed.returncode == 1 and json.loads(listed.stdout)["alerts"][0]["status"] == "firing"

            # a restart: the alert is still firing (no new event) and its pending delivery goes on
            sender.close()
            collector.stop()
            receiver.accept()
            collector.start()
            sender = Sender(collector)
            receiver.wait_for(lambda rs: any(r["status"] == 200 for r in rs))
            assert states(collector)["median-latency"]["status"] == "firing"
            fired, resolved = fired_and_resolved(receiver.requests, "median-latency")
            assert fired == {event_id} and not resolved
            assert all(r["signed"] for r in receiver.requests)
            verify = documented_verify()  # the check docs/alerts.md gives receivers
            assert all(verify(r["raw"], r["signature"], SECRET) for r in receiver.requests)
            assert not verify(receiver.requests[0]["raw"] + b" ", receiver.requests[0]["signature"], SECRET)
            for page in ("/?refresh=0", "/?refresh=0&view=target&target=bot"):  # the dashboard shows it
                dom = parse_dom(dump_dom(collector.url + page, tmp_path / "chromium"))
                shown = dom.find("li", data_alert="median-latency", data_target="bot")
                assert shown.attrs["data-status"] == "firing" and "80 samples" in squash(shown.text)
                links = {a.text: a.attrs["href"] for a in shown.find_all("a")}
                assert links["window →"] == "/?view=evidence&target=bot&scope=all&metric=end_to_end_latency&refresh=0"
                assert links["spans →"].startswith("/?view=traces&target=bot&range=custom&from=")

            # fast calls until the evidence puts the median back under the ceiling: resolves, one new event
            sender.calls("bot", 300, 0.1)
            state = wait_state(collector, "median-latency", lambda s: s["status"] == "ok")
            assert state["evidence"] == "right_side" and state["samples"] == 380
            receiver.wait_for(lambda rs: fired_and_resolved(rs, "median-latency")[1])
            fired, resolved = fired_and_resolved(receiver.requests, "median-latency")
            assert fired == {event_id} and len(resolved) == 1 and event_id not in resolved
            kept = [b["state"] for b in receiver.accepted() if b["rule"] == "median-latency"]
            assert kept == ["fired", "resolved"]
            assert run_cli("alerts", "--url", collector.url, check=False).returncode == 0
        finally:
            sender.close()
            collector.stop()
    # the state is in the file: read without a collector
    listed = run_cli("alerts", "--db", str(tmp_path / "m.duckdb"), "--json")
    assert json.loads(listed.stdout)["alerts"][0]["status"] == "ok"
    deliveries = run_cli("sql", "select count(*) as n, count(delivered_us) as done from alert_deliveries",
                         "--db", str(tmp_path / "m.duckdb"), "--format", "json")
    assert json.loads(deliveries.stdout) == [{"n": 2, "done": 2}]


def test_a_regression_fires_no_data_fires_and_silencing_holds_delivery_back(tmp_path):
    rules = f"""
[[alerts]]
name = "slower-than-yesterday"
kind = "regression"
metric = "end_to_end_latency"
quantile = 0.5
tolerance = 0.5
range = "{range_with_room()}"
baseline = "24h"

[[alerts]]
name = "bot-silent"
kind = "no_data"
range = "1h"
"""
    secret_file = tmp_path / "webhook.key"
    secret_file.write_bytes(SECRET)
    path = profile(tmp_path / "bot.toml", "bot", rules)
    with WebhookReceiver(SECRET) as receiver:
        collector = CollectorProcess(tmp_path / "m.duckdb", args=serve_args(path, secret_file, receiver)).start()
        sender = Sender(collector)
        try:
            # nothing sent yet: the no-data rule fires, and is delivered
            state = wait_state(collector, "bot-silent", lambda s: s["status"] == "firing")
            assert state["evidence"] == "no_data"
            receiver.wait_for(lambda rs: fired_and_resolved(rs, "bot-silent")[0])
            assert run_cli("alerts", "--url", collector.url, check=False).returncode == 1

            # yesterday's fast calls (the baseline, before the rule's current range): still no data for an hour
            start_ns = range_start_ns(wait_state(collector, "slower-than-yesterday", lambda s: s["links"]))
            sender.calls("bot", 120, 0.2, end_ns=start_ns - 3 * HOUR_NS)
            state = wait_state(collector, "bot-silent", lambda s: s["evaluated"] and s["links"]["windows"][0]["samples"]
                               == 0 and s["status"] == "firing")

            # silenced before today's calls come slower: it fires, but nothing is delivered and the exit is 0
            silenced = run_cli("alerts", "silence", "slower-than-yesterday", "--target", "bot", "--for", "2h",
                               "--url", collector.url)
            assert "silenced slower-than-yesterday for bot until" in silenced.stdout
            sender.calls("bot", 80, 2.0)
            state = wait_state(collector, "slower-than-yesterday", lambda s: s["firing"])
            assert state["status"] == "silenced" and state["evidence"] == "wrong_side" and state["silenced_until"]
            assert state["value"] == pytest.approx(1.8, rel=0.05) and state["bound"] > 0.5
            wait_state(collector, "bot-silent", lambda s: s["status"] == "ok")
            receiver.wait_for(lambda rs: fired_and_resolved(rs, "bot-silent")[1])
            assert not fired_and_resolved(receiver.requests, "slower-than-yesterday")[0]
            listed = run_cli("alerts", "--url", collector.url, check=False)
            assert listed.returncode == 0 and "silenced" in listed.stdout

            # Prometheus scrapes the states
            scrape = (f"scrape_configs:\n  - job_name: meritlens\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{collector.http_port}']\n")
            with PrometheusProcess(tmp_path / "prometheus", scrape) as prometheus:
                firing = prometheus.wait_for('meritlens_alert_firing{target="bot"}', lambda r: len(r) == 2)
                values = {r["metric"]["rule"]: r["value"][1] for r in firing}
                assert values == {"slower-than-yesterday": "1", "bot-silent": "0"}
                silenced = prometheus.wait_for("meritlens_alert_silenced == 1", lambda r: len(r) == 1)
                assert silenced[0]["metric"]["rule"] == "slower-than-yesterday"
                # the documented alert rule: a silenced rule does not page
                rules = documented("yaml", "MeritlensAlertFiring")
                rules_file = tmp_path / "rules.yml"
                rules_file.write_text(rules)
                checked = subprocess.run([PROMTOOL, "check", "rules", str(rules_file)], capture_output=True, text=True)
                assert checked.returncode == 0, checked.stdout + checked.stderr
                expr = re.search(r"expr: (.*)", rules).group(1)
                assert prometheus.api("query", query=expr)["result"] == []
                assert len(prometheus.api("query", query=expr.split(" unless ")[0])["result"]) == 1

            unknown = run_cli("alerts", "silence", "no-such-rule", "--for", "1h", "--url", collector.url, check=False)
            assert unknown.returncode == 2 and "no alert rule 'no-such-rule'" in unknown.stderr
        finally:
            sender.close()
            collector.stop()


def range_start_ns(state: dict) -> int:
    """The start of a rule's current range, from its evaluation's links."""
    current = next(w for w in state["links"]["windows"] if w["range"] == "current")
    return int(dt.datetime.fromisoformat(current["from"]).timestamp()) * 10**9


def test_alerts_against_a_lake_say_so_in_one_line(tmp_path):
    lake = tmp_path / "lake"
    collector = CollectorProcess(tmp_path / "m.duckdb", args=("--no-grpc", "--lake", str(lake))).start()
    collector.stop()
    refused = run_cli("alerts", "--lake", str(lake), check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "single-node collector" in refused.stderr
