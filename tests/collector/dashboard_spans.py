"""Spans with known figures that the dashboard and /metrics tests send, and how they send them."""

from __future__ import annotations

import httpx

from meritlens.instrumentation import conventions as c
from tests.otlp_builders import make_request, make_span

T0 = 1_700_000_000 * 10**9
TARGET = "support-bot/answer"
XSS_TARGET = """<img src=x onerror="document.body.dataset.pwned=1">'&"</b>\\'--"""
MODEL = "house-model-1"
"""A model without a price: the collector prices nothing of it, so an unpriced call stays unpriced."""
TASK5_TRACE = "ab" * 16


def post(collector, spans) -> None:
    r = httpx.post(collector.traces_url, content=make_request(spans).SerializeToString(),
                   headers={"Content-Type": "application/x-protobuf"})
    assert r.status_code == 200, r.text


def known_spans(collector) -> None:
    """Five tasks of TARGET, one a minute from T0: latencies 1..5 s, costs $0.01..$0.04 and one task
    with an unpriced call; 100 input tokens each; every call of MODEL by provider acme. Tasks 1
    and 2 are in assessment a1. One span of XSS_TARGET."""
    spans = []
    model = {c.GEN_AI_REQUEST_MODEL: MODEL, c.GEN_AI_PROVIDER_NAME: "acme"}
    for i, seconds in enumerate((1.0, 2.0, 3.0, 4.0)):
        attrs = {c.TARGET_ID: TARGET, c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 100,
                 c.COST_USD: round(0.01 * (i + 1), 2), **model}
        if i < 2:
            attrs[c.ASSESSMENT_ID] = "a1"
        spans.append(make_span(attrs, start_ns=T0 + i * 60 * 10**9, duration_s=seconds))
    # Task 5: two calls 5 s apart end to end; the second is not priced, so the task has no cost.
    trace = bytes.fromhex(TASK5_TRACE)
    base = {c.TARGET_ID: TARGET, c.TASK_ID: "task-5", c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 50,
            **model}
    spans.append(make_span({**base, c.COST_USD: 0.5}, trace_id=trace, start_ns=T0 + 300 * 10**9, duration_s=2.0))
    spans.append(make_span(base, trace_id=trace, start_ns=T0 + 303 * 10**9, duration_s=2.0))
    spans.append(make_span({c.TARGET_ID: XSS_TARGET, c.GEN_AI_USAGE_INPUT_TOKENS: 7}, start_ns=T0, duration_s=0.25))
    post(collector, spans)
