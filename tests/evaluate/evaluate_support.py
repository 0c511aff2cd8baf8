"""Helpers for the `meritlens evaluate` tests: OTLP spans, a real DuckDB file, a real collector process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from meritlens.collector._normalize import normalize
from meritlens.collector._store import SpanStore
from meritlens.instrumentation import conventions as c

MERITLENS = str(Path(sys.executable).parent / "meritlens")
TARGET = "shop-bot/answer"
BASE_NS = 1_750_000_000_000_000_000


def _kv(key, value):
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def span(n: int, *, trace: int | None = None, error: bool = False, **attributes) -> Span:
    """Span number ``n`` (its ids and times derive from n), with the given attributes."""
    start = BASE_NS + n * 1_000_000_000
    attributes.setdefault(c.TARGET_ID, TARGET)
    return Span(
        trace_id=(trace or n).to_bytes(16, "big"),
        span_id=n.to_bytes(8, "big"),
        name=f"{attributes.get(c.GEN_AI_OPERATION_NAME, 'chat')} span {n}",
        kind=3,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 500_000_000,
        attributes=[_kv(k, v) for k, v in attributes.items()],
        status=Status(code=2 if error else 1),
    )


def output(text: str) -> dict:
    return {c.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])}


def request(spans: list[Span]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])


def scenario_spans() -> list[Span]:
    """Four tasks of TARGET: two repeated cases, tool spans (one failed), a retry, outcomes, an assessment."""
    arm = {c.ASSESSMENT_ID: "arm-a"}
    chat = {c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 100, c.GEN_AI_USAGE_OUTPUT_TOKENS: 20}
    tool = {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "search"}
    return [
        span(1, **{c.TASK_ID: "t1", c.CASE_ID: "c1", **arm, **chat, **output('{"answer": "a"}'), c.OUTCOME_SUCCESS: True}),
        span(2, trace=1, **{c.TASK_ID: "t1", **arm, **tool}),
        span(3, **{c.TASK_ID: "t2", c.CASE_ID: "c1", **arm, **chat, **output('{"answer": "a"}'), c.RETRIES: 1,
                   c.OUTCOME_SUCCESS: True}),
        span(4, trace=3, error=True, **{c.TASK_ID: "t2", **arm, **tool, c.ERROR_TYPE: "Timeout"}),
        span(5, **{c.TASK_ID: "t3", c.CASE_ID: "c2", **chat, **output('{"answer": 3}'), c.OUTCOME_SUCCESS: False}),
        span(6, **{c.TASK_ID: "t4", c.CASE_ID: "c2", **chat, **output('{"answer": 4}')}),
    ]


def store_spans(db: Path, spans: list[Span]) -> None:
    """Write spans to the DuckDB file the way the collector does (normalize, then the store)."""
    store = SpanStore(str(db))
    store.start()
    try:
        batch = normalize(request(spans))
        assert not batch.refused, batch.refused
        store.write(batch.to_arrow())
    finally:
        store.shutdown()


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("MERITLENS_URL", None)
    return subprocess.run([MERITLENS, *args], capture_output=True, text=True, cwd=cwd, env=full_env, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningCollector:
    def __init__(self, db: Path, extra_env: dict | None = None):
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **(extra_env or {})}
        self.process = subprocess.Popen(
            [MERITLENS, "serve", "--db", str(db), "--http-port", str(self.port), "--grpc-port", str(free_port())],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"collector exited: {self.process.stdout.read()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200 and os.path.exists(f"{db}.collector"):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("collector did not become healthy")

    def send(self, spans: list[Span]) -> None:
        reply = httpx.post(self.url + "/v1/traces", content=request(spans).SerializeToString(),
                           headers={"Content-Type": "application/x-protobuf"}, timeout=30)
        assert reply.status_code == 200, reply.text

    def sql(self, query: str) -> list[dict]:
        reply = httpx.post(self.url + "/api/sql", json={"sql": query}, timeout=30)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        return [dict(zip(body["columns"], row)) for row in body["rows"]]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


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
