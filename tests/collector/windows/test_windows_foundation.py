"""The first window processor, end to end through the real collector and the real OTLP exporter."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from meritlens.instrumentation import conventions as c


@pytest.fixture
def tracer(collector):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.traces_url)))
    yield provider.get_tracer("tests")
    provider.shutdown()


def _call(tracer, start_ns: int, seconds: float, **attributes):
    span = tracer.start_span("chat m", attributes=attributes, start_time=start_ns)
    span.end(end_time=start_ns + int(seconds * 1e9))
    return span


def _window(collector, metric: str, scope: str = "all", target: str = "bot") -> dict:
    rows = collector.sql(f"select * from windows where target_id = '{target}' and metric = '{metric}'"
                         f" and scope = '{scope}'")
    assert len(rows) == 1, rows
    return rows[0]


def test_sums_percentiles_and_sample_counts(collector, tracer):
    t0 = 1_700_000_000 * 10**9
    latencies = [0.5, 1.0, 1.5, 2.0, 4.0]
    for i, seconds in enumerate(latencies):
        _call(tracer, t0 + i * 10**10, seconds, **{
            c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: "chat",
            c.GEN_AI_USAGE_INPUT_TOKENS: 100 + i, c.GEN_AI_USAGE_OUTPUT_TOKENS: 10 * i, c.COST_USD: 0.01,
        })
    w = _window(collector, "input_tokens")
    shown = (w["aggregation"], w["value"], w["sample_count"], w["unit"], w["state"])
    assert shown == ("sum", 510.0, 5, "tokens", "measured")
    w = _window(collector, "output_tokens")
    assert (w["value"], w["sample_count"]) == (100.0, 5)  # includes an observed 0
    w = _window(collector, "total_task_cost")
    assert w["aggregation"] == "sum" and w["value"] == pytest.approx(0.05) and w["state"] == "measured"
    w = _window(collector, "end_to_end_latency")
    assert w["aggregation"] == "percentile" and w["unit"] == "s" and w["sample_count"] == 5
    expected = np.percentile(latencies, [50, 90, 95, 99])
    assert w["value"] == pytest.approx(expected[2])
    assert [w["p50"], w["p90"], w["p95"], w["p99"]] == pytest.approx(list(expected))
    assert (w["count"], w["min"], w["max"]) == (5, 0.5, 4.0)
    assert w["mean"] == pytest.approx(np.mean(latencies))
    assert w["first_span_time"].startswith("2023-11-14T22:13:20.5")  # the first span's end time
    assert w["last_span_time"].startswith("2023-11-14T22:14:04")


def test_cost_without_prices_is_not_configured_never_zero(collector, tracer):
    for _ in range(3):
        _call(tracer, 1_700_000_000 * 10**9, 0.1, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 5})
    w = _window(collector, "total_task_cost")
    assert (w["state"], w["value"], w["sample_count"], w["evidence_digest"]) == ("not_configured", None, 0, None)
    assert _window(collector, "input_tokens")["value"] == 15.0


def test_a_task_with_an_unpriced_call_has_no_cost(collector, tracer):
    from opentelemetry import trace

    t0 = 1_700_000_000 * 10**9
    root = tracer.start_span("task", attributes={c.TARGET_ID: "bot"}, start_time=t0)
    ctx = trace.set_span_in_context(root)
    for cost in (0.5, None):
        attrs = {c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 1}
        if cost is not None:
            attrs[c.COST_USD] = cost
        tracer.start_span("chat m", context=ctx, attributes=attrs, start_time=t0).end(end_time=t0 + 10**8)
    root.end(end_time=t0 + 10**9)
    _call(tracer, t0, 0.2, **{c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: "chat", c.COST_USD: 0.25})
    w = _window(collector, "total_task_cost")
    assert (w["value"], w["sample_count"]) == (0.25, 1)  # the partially priced task is left out, not summed
    latency = _window(collector, "end_to_end_latency")
    assert latency["sample_count"] == 2 and latency["max"] == pytest.approx(1.0)  # task = trace, root to end


def test_assessment_scope_and_orchestration_spans(collector, tracer):
    t0 = 1_700_000_000 * 10**9
    _call(tracer, t0, 1.0, **{c.TARGET_ID: "bot", c.ASSESSMENT_ID: "a1", c.GEN_AI_USAGE_INPUT_TOKENS: 10})
    _call(tracer, t0, 1.0, **{c.TARGET_ID: "bot", c.ASSESSMENT_ID: "a2", c.GEN_AI_USAGE_INPUT_TOKENS: 20})
    _call(tracer, t0, 1.0, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 40})
    _call(tracer, t0, 9.0, **{c.TARGET_ID: "bot", c.ROLE: c.ROLE_ORCHESTRATION, c.ASSESSMENT_ID: "a1",
                             c.GEN_AI_USAGE_INPUT_TOKENS: 1000, c.COST_USD: 5.0})
    assert _window(collector, "input_tokens")["value"] == 70.0
    assert _window(collector, "input_tokens", "a1")["value"] == 10.0
    assert _window(collector, "input_tokens", "a2")["value"] == 20.0
    assert _window(collector, "total_task_cost", "a1")["state"] == "not_configured"
    scopes = collector.sql("select distinct scope from windows order by scope")
    assert [r["scope"] for r in scopes] == ["a1", "a2", "all"]


def test_evidence_digest_can_be_rederived_with_sql(collector, tracer):
    for i in range(3):
        _call(tracer, 1_700_000_000 * 10**9, 0.1, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: i})
    ids = [f"{r['trace_id']}:{r['span_id']}" for r in collector.sql("select trace_id, span_id from spans")]
    md5s = [hashlib.md5(k.encode()).digest() for k in ids]
    high = sum(int.from_bytes(d[:8], "little") for d in md5s) % 2**64
    low = sum(int.from_bytes(d[8:], "little") for d in md5s) % 2**64
    expected = hashlib.sha256(f"{len(ids)}:{high:016x}:{low:016x}".encode()).hexdigest()
    w = _window(collector, "input_tokens")
    assert w["evidence_digest"] == expected
    assert w["evidence_media_type"] == "application/vnd.meritlens.span-set"
    assert w["evidence_uri"].startswith("meritlens://meritlens.duckdb/spans?target_id=bot&scope=all")
    rederived = collector.sql(
        "select sha256(count(*) || ':' || printf('%016x', (sum(md5_number_upper(k)) % 18446744073709551616)::UBIGINT)"
        " || ':' || printf('%016x', (sum(md5_number_lower(k)) % 18446744073709551616)::UBIGINT)) d"
        " from (select trace_id || ':' || span_id k from spans"
        " where target_id = 'bot' and role = 'application' and input_tokens is not null)")
    assert rederived == [{"d": expected}]


def test_windows_are_replaced_and_survive_a_restart(collector, tracer):
    for _ in range(2):
        _call(tracer, 1_700_000_000 * 10**9, 0.1, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10})
    assert _window(collector, "input_tokens")["value"] == 20.0
    _call(tracer, 1_700_000_000 * 10**9, 0.1, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10})
    w = _window(collector, "input_tokens")
    assert (w["value"], w["sample_count"]) == (30.0, 3)
    assert collector.sql("select count(*) n from windows where metric = 'input_tokens'") == [{"n": 1}]
    query = ("select target_id, metric, scope, round(value, 9) as value, sample_count, evidence_digest "
             "from windows order by all")
    before = collector.sql(query)
    collector.stop()
    collector.start()
    after = collector.sql(query)
    assert after == before
    # the restart took the saved window state up (no span is reread for it); the next span still
    # counts exactly once more
    log = collector.log_path.read_text()
    assert "windows of 1 keys taken up" in log
    _call(tracer, 1_700_000_000 * 10**9, 0.1, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10})
    w = _window(collector, "input_tokens")
    assert (w["value"], w["sample_count"]) == (40.0, 4)
    # kill -9: the state saved at the last shutdown is one span behind the stored windows; the
    # restart takes it up and follows that span from `spans` instead of rereading the target's spans
    before = collector.sql(query)
    collector.kill9()
    collector.start()
    assert collector.sql(query) == before
    deadline = time.monotonic() + 30  # the window thread follows the span once the collector has started
    while "windows brought up to date" not in collector.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "windows brought up to date from 1 stored spans" in collector.log()
    _call(tracer, 1_700_000_000 * 10**9, 0.1, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10})
    w = _window(collector, "input_tokens")
    assert (w["value"], w["sample_count"]) == (50.0, 5)


def test_a_single_latency_sample_is_insufficient_for_a_percentile(collector, tracer):
    _call(tracer, 1_700_000_000 * 10**9, 0.3, **{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 1})
    w = _window(collector, "end_to_end_latency")
    assert (w["state"], w["sample_count"]) == ("insufficient_evidence", 1)
    assert _window(collector, "input_tokens")["state"] == "measured"
