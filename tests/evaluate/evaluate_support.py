"""Helpers for the `meritlens evaluate` tests: OTLP spans, a real DuckDB file, a real collector process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from meritlens.collector.process._normalize import normalize
from meritlens.instrumentation import conventions as c
from tests.conftest import CollectorProcess
from tests.conftest import run_cli as _run_cli
from tests.otlp_builders import make_request, make_span
from tests.store_under_test import StoreUnderTest

TARGET = "shop-bot/answer"
BASE_NS = 1_750_000_000_000_000_000


def span(n: int, *, trace: int | None = None, error: bool = False, **attributes) -> Span:
    """Span number ``n`` (its ids and times derive from n), with the given attributes."""
    attributes.setdefault(c.TARGET_ID, TARGET)
    built = make_span(attributes, trace_id=(trace or n).to_bytes(16, "big"), span_id=n.to_bytes(8, "big"),
                      start_ns=BASE_NS + n * 1_000_000_000,
                      name=f"{attributes.get(c.GEN_AI_OPERATION_NAME, 'chat')} span {n}")
    built.status.CopyFrom(Status(code=2 if error else 1))
    return built


def output(text: str) -> dict:
    return {c.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])}


def scenario_spans() -> list[Span]:
    """Four tasks of TARGET: two repeated cases, tool spans (one failed), a retry, outcomes, an assessment."""
    arm = {c.ASSESSMENT_ID: "arm-a"}
    chat = {c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 100, c.GEN_AI_USAGE_OUTPUT_TOKENS: 20}
    tool = {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "search"}
    return [
        span(1, **{c.TASK_ID: "t1", c.CASE_ID: "c1", **arm, **chat, **output('{"answer": "a"}'),
                   c.OUTCOME_SUCCESS: True}),
        span(2, trace=1, **{c.TASK_ID: "t1", **arm, **tool}),
        span(3, **{c.TASK_ID: "t2", c.CASE_ID: "c1", **arm, **chat, **output('{"answer": "a"}'), c.RETRIES: 1,
                   c.OUTCOME_SUCCESS: True}),
        span(4, trace=3, error=True, **{c.TASK_ID: "t2", **arm, **tool, c.ERROR_TYPE: "Timeout"}),
        span(5, **{c.TASK_ID: "t3", c.CASE_ID: "c2", **chat, **output('{"answer": 3}'), c.OUTCOME_SUCCESS: False}),
        span(6, **{c.TASK_ID: "t4", c.CASE_ID: "c2", **chat, **output('{"answer": 4}')}),
    ]


def store_spans(db: Path, spans: list[Span]) -> None:
    """Write spans to the DuckDB file the way the collector does (normalize, then the store)."""
    store = StoreUnderTest(str(db))
    store.start()
    try:
        batch = normalize(make_request(spans))
        assert not batch.refused, batch.refused
        store.write(batch.to_arrow())
    finally:
        store.shutdown()


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None):
    """Run the CLI; the caller checks the exit code."""
    return _run_cli(*args, check=False, env=env, cwd=cwd)


class RunningCollector(CollectorProcess):
    """The shared collector process, plus sending spans and querying over HTTP."""

    def __init__(self, db: Path, extra_env: dict | None = None):
        super().__init__(db, env=extra_env)
        self.start()
        # `evaluate --db` finds the collector through the address file it writes after listening.
        address = Path(f"{db}.collector")
        for _ in range(200):
            if address.exists():
                break
            time.sleep(0.05)

    def send(self, spans: list[Span]) -> None:
        reply = httpx.post(self.traces_url, content=make_request(spans).SerializeToString(),
                           headers={"Content-Type": "application/x-protobuf"}, timeout=30)
        assert reply.status_code == 200, reply.text

    def sql(self, query: str) -> list[dict]:
        reply = httpx.post(self.url + "/api/sql", json={"sql": query}, timeout=30)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        return [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]]


PLUGIN_SOURCE = '''
import os

from meritlens.analytics import Metric


class SpanCountMetric(Metric):
    """Counts the scope's spans; raises when MERITLENS_TEST_EXPLODE is set."""

    name = "span_count"
    unit = "spans"
    aggregation = "single_value"

    def compute(self, evidence, *, run_dir, options, judge):
        if os.environ.get("MERITLENS_TEST_EXPLODE"):
            raise RuntimeError("the span counter exploded")
        return [self.measurement(value=len(evidence.spans), summary=f"{len(evidence.spans)} spans",
                                 tasks_or_spans=evidence.spans, sample_count=1)]
'''
