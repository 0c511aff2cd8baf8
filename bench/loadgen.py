"""OTLP/HTTP protobuf load generator: realistic LLM spans (~15 attributes, 1 event) in batches.

Runs in its own process(es); reports acknowledged spans per second. Used by bench/ingest.py.
usage: python bench/loadgen.py URL TOTAL_SPANS BATCH CONCURRENCY [TARGETS [RATE [DEADLINE_S]]]

RATE (spans/s, 0 = as fast as acknowledged) paces the batches: batch k is not sent before k*BATCH/RATE
seconds after sending starts. The line "sending" is printed (flushed) when sending starts, so a driver
can measure the collector over the sending period only. DEADLINE_S (0 = none) bounds a run: no batch is
started after it, so the spans sent are always the first batches; the report counts what was sent.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def _kv(key, value) -> KeyValue:
    if isinstance(value, bool):
        v = AnyValue(bool_value=value)
    elif isinstance(value, int):
        v = AnyValue(int_value=value)
    elif isinstance(value, float):
        v = AnyValue(double_value=value)
    else:
        v = AnyValue(string_value=value)
    return KeyValue(key=key, value=v)


def realistic_span(i: int, targets: int, now_ns: int) -> Span:
    start = now_ns + i * 1000
    span = Span(trace_id=os.urandom(16), span_id=os.urandom(8), name="chat gpt-4o-mini", kind=3,
                start_time_unix_nano=start, end_time_unix_nano=start + 250_000_000 + (i % 97) * 1_000_000)
    span.attributes.extend([
        _kv("meritlens.target.id", f"bot-{i % targets}"), _kv("meritlens.role", "application"),
        _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.provider.name", "openai"),
        _kv("gen_ai.request.model", "gpt-4o-mini"), _kv("gen_ai.response.model", "gpt-4o-mini-2024-07-18"),
        _kv("gen_ai.usage.input_tokens", 100 + i % 50), _kv("gen_ai.usage.output_tokens", 20 + i % 7),
        _kv("gen_ai.usage.cache_read.input_tokens", 40), _kv("gen_ai.response.finish_reasons", "stop"),
        _kv("gen_ai.request.stream", False), _kv("meritlens.cost.usd", 0.000123),
        _kv("meritlens.retries", 0), _kv("server.address", "api.openai.com"), _kv("http.status_code", 200),
    ])
    event = span.events.add()
    event.name = "gen_ai.choice"
    event.time_unix_nano = start + 1000
    event.attributes.extend([_kv("index", 0), _kv("finish_reason", "stop")])
    return span


def build_bodies(total: int, batch: int, targets: int) -> list[bytes]:
    now = time.time_ns()
    bodies = []
    for b in range(0, total, batch):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.append(_kv("service.name", "bench"))
        ss = rs.scope_spans.add()
        ss.scope.name = "bench"
        ss.spans.extend(realistic_span(b + j, targets, now) for j in range(min(batch, total - b)))
        bodies.append(request.SerializeToString())
    return bodies


def run(url: str, bodies: list[bytes], concurrency: int, interval_s: float = 0.0,
        deadline_s: float = 0.0) -> tuple[float, int, int]:
    lock = threading.Lock()
    queue = list(reversed(list(enumerate(bodies))))
    retried = [0]
    sent = [0]

    def worker():
        with httpx.Client(timeout=120) as client:
            while True:
                with lock:
                    if not queue or (deadline_s and time.perf_counter() - t0 > deadline_s):
                        return
                    k, body = queue.pop()
                    sent[0] += 1
                if interval_s:
                    delay = t0 + k * interval_s - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                while True:
                    r = client.post(url, content=body, headers={"Content-Type": "application/x-protobuf"})
                    if r.status_code == 200:
                        break
                    if r.status_code in (429, 503):
                        with lock:
                            retried[0] += 1
                        time.sleep(0.01)
                        continue
                    raise SystemExit(f"HTTP {r.status_code}: {r.text[:200]}")

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, retried[0], sent[0]


if __name__ == "__main__":
    url, total, batch, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    targets = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    rate = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    deadline = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    bodies = build_bodies(total, batch, targets)
    print("sending", flush=True)
    elapsed, retried, sent_batches = run(url, bodies, concurrency, batch / rate if rate else 0.0, deadline)
    if sent_batches < len(bodies):
        total = sent_batches * batch
    print(f"{total} spans in {elapsed:.2f}s = {total / elapsed:,.0f} spans/s (503 retries: {retried})")
