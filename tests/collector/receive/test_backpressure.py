"""Overload: more concurrent load than the in-flight share of `--memory-limit` holds gets 503 +
Retry-After, memory stays bounded, and every acknowledged span is stored."""

from __future__ import annotations

import random
import threading
import time

import duckdb
import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from meritlens.collector._settings import MemoryBudget
from tests.collector.collector_proc import CollectorProcess, make_request

CLIENTS = 40
REQUESTS_PER_CLIENT = 3
VALID_SPANS = 5
PADDED_SPANS = 35
MEMORY_LIMIT = 493 * 1024 * 1024
INFLIGHT_LIMIT = MemoryBudget.of(MEMORY_LIMIT).in_flight
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _request(batch: int):
    """~1.4 MiB: 5 small spans that are stored, 35 spans with a 42 KB value that the attribute limit
    refuses. The refused spans cost the receiver the same memory (read, decoded, checked) but keep the
    DuckDB side small, so the peak memory measured here is the receivers'."""
    request = make_request(batch, VALID_SPANS + PADDED_SPANS)
    for span in request.resource_spans[0].scope_spans[0].spans[VALID_SPANS:]:
        attr = span.attributes.add()
        attr.key, attr.value.string_value = "padding", f"{batch:06d}" * 7000
    return request


def test_overload_gets_503_with_retry_after_bounded_memory_and_no_lost_span(tmp_path):
    args = (
        "--memory-limit", str(MEMORY_LIMIT), "--max-body-bytes", "2MiB",
        "--max-spans-per-request", "100", "--max-attribute-bytes", "32KiB",
    )
    requests = {b: _request(b) for b in range(CLIENTS * REQUESTS_PER_CLIENT)}
    bodies = {b: r.SerializeToString() for b, r in requests.items()}
    assert len(bodies[0]) > 1024 * 1024
    acked: set[int] = set()
    refusals: list[bytes] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=collector.url, timeout=60) as http:
            for batch in range(index * REQUESTS_PER_CLIENT, (index + 1) * REQUESTS_PER_CLIENT):
                while True:
                    response = http.post("/v1/traces", content=bodies[batch], headers=PROTOBUF)
                    if response.status_code == 200:
                        result = ExportTraceServiceResponse.FromString(response.content)
                        assert result.partial_success.rejected_spans == PADDED_SPANS
                        with lock:
                            acked.add(batch)
                        break
                    assert response.status_code == 503, response.status_code
                    with lock:
                        retry_after = response.headers.get("Retry-After", "missing").encode()
                        refusals.append(retry_after + b" " + response.content)
                    time.sleep(float(response.headers["Retry-After"]) * rng.uniform(0.05, 0.3))

    with CollectorProcess(tmp_path / "busy.duckdb", args=args) as collector:
        with collector.client() as http:  # warm up: first request's imports and allocations
            warm_up = http.post("/v1/traces", content=_request(10_000).SerializeToString(), headers=PROTOBUF)
            assert warm_up.status_code == 200
        idle_rss = collector.rss_bytes()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        growth = collector.peak_rss_bytes() - idle_rss

    assert acked == set(requests)
    assert refusals, f"{CLIENTS} clients charged ~7 MiB each never exceeded a {INFLIGHT_LIMIT >> 20} MiB share"
    assert all(r.startswith(b"1 ") for r in refusals), refusals[0]
    assert b"in-flight bytes" in refusals[0]
    # Unbounded, 40 such requests at once cost ~280 MiB. A request is charged its body and 4x the body for
    # its decoded copies (these spans' attributes are large); allocator slack comes on top.
    assert growth < INFLIGHT_LIMIT + 64 * 1024 * 1024, f"peak RSS grew by {growth / 2**20:.0f} MiB"

    expected = {
        span.span_id.hex()
        for batch in acked
        for span in requests[batch].resource_spans[0].scope_spans[0].spans[:VALID_SPANS]
    }
    con = duckdb.connect(str(collector.db), read_only=True)
    try:
        stored = [row[0] for row in con.execute("SELECT span_id FROM spans").fetchall()]
    finally:
        con.close()
    assert len(stored) == len(set(stored))
    assert expected <= set(stored)
    assert len(stored) == len(expected) + VALID_SPANS  # plus the warm-up request
