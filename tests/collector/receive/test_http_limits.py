"""OTLP/HTTP limits and error paths against the real collector: sizes, gzip, span limits, bad data."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.collector.collector_proc import CollectorProcess, make_request

PROTOBUF = {"Content-Type": "application/x-protobuf"}
GZIP_PROTOBUF = {**PROTOBUF, "Content-Encoding": "gzip"}


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    args = ("--max-attributes", "8", "--max-attribute-bytes", "1KiB", "--max-spans-per-request", "1000")
    with CollectorProcess(tmp_path_factory.mktemp("limits") / "spans.duckdb", args=args) as running:
        yield running


@pytest.fixture(scope="module")
def default_collector(tmp_path_factory):
    with CollectorProcess(tmp_path_factory.mktemp("defaults") / "spans.duckdb") as running:
        yield running


def post(collector, body: bytes, headers=PROTOBUF):
    with collector.client(timeout=30) as client:
        return client.post("/v1/traces", content=body, headers=headers)


def status_of(response) -> status_pb2.Status:
    if response.headers["Content-Type"].startswith("application/json"):
        doc = json.loads(response.content)
        return status_pb2.Status(code=doc.get("code", 0), message=doc.get("message", ""))
    return status_pb2.Status.FromString(response.content)


def stored(collector, request) -> int:
    ids = ", ".join(f"'{s.span_id.hex()}'" for s in request.resource_spans[0].scope_spans[0].spans)
    return collector.sql(f"SELECT count(*) FROM spans WHERE span_id IN ({ids})")["rows"][0][0]


def _zeros_gzip(total: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1024 * 1024)
    parts = [compressor.compress(chunk) for _ in range(total // len(chunk))]
    parts.append(compressor.flush())
    return b"".join(parts)


def test_gzip_bomb_costs_at_most_the_default_body_limit(default_collector):
    bomb = _zeros_gzip(512 * 1024 * 1024)
    assert len(bomb) < 1024 * 1024
    rss_before = default_collector.rss_bytes()
    response = post(default_collector, bomb, GZIP_PROTOBUF)
    assert response.status_code == 413
    status = status_of(response)
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert "exceeds the limit of 20971520 bytes after decompression" in status.message
    # Decompressing everything would need 512 MiB; the stream stops at the 20 MiB limit.
    assert default_collector.peak_rss_bytes() - rss_before < 64 * 1024 * 1024


def test_declared_length_over_the_limit_is_refused_before_reading(default_collector):
    response = post(default_collector, bytes(21 * 1024 * 1024))
    assert response.status_code == 413
    assert "exceeds the limit" in status_of(response).message


def test_several_gzip_members_are_one_body(collector):
    request = make_request(30_000, 6)
    raw = request.SerializeToString()
    body = gzip.compress(raw[:100]) + gzip.compress(raw[100:])
    response = post(collector, body, GZIP_PROTOBUF)
    assert response.status_code == 200, response.content
    assert stored(collector, request) == 6


@pytest.mark.parametrize("cut", [5, 30])
def test_truncated_gzip_is_a_bad_request(collector, cut):
    body = gzip.compress(make_request(30_001, 6).SerializeToString())[:cut]
    response = post(collector, body, GZIP_PROTOBUF)
    assert response.status_code == 400
    assert "truncated" in status_of(response).message


def test_bytes_after_the_gzip_stream_are_a_bad_request(collector):
    body = gzip.compress(make_request(30_002, 2).SerializeToString()) + b"trailing junk"
    response = post(collector, body, GZIP_PROTOBUF)
    assert response.status_code == 400
    assert "not valid gzip data" in status_of(response).message


def test_deeply_nested_json_is_a_bad_request_not_a_server_error(collector):
    depth = 100_000
    value = '{"arrayValue":{"values":[' * depth + '{"intValue":1}' + "]}}" * depth
    body = ('{"resourceSpans":[{"resource":{"attributes":[{"key":"a","value":' + value + "}]}}]}").encode()
    response = post(collector, body, {"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "nested too deeply" in status_of(response).message


def test_out_of_range_kind_and_status_are_refused_per_span_not_a_server_error(collector):
    request = make_request(30_003, 3)
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].kind = 1000
    spans[1].status.code = 9
    response = post(collector, request.SerializeToString())
    assert response.status_code == 200
    result = ExportTraceServiceResponse.FromString(response.content)
    assert result.partial_success.rejected_spans == 2
    assert "kind 1000 is not an OTLP SpanKind" in result.partial_success.error_message
    assert "status code 9 is not an OTLP StatusCode" in result.partial_success.error_message
    assert stored(collector, request) == 1


def test_span_over_the_attribute_count_limit_is_refused_with_the_reason(collector):
    request = make_request(30_004, 2)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for i in range(9):
        attr = span.attributes.add()
        attr.key, attr.value.int_value = f"extra.{i}", i
    response = post(collector, request.SerializeToString())
    result = ExportTraceServiceResponse.FromString(response.content)
    assert result.partial_success.rejected_spans == 1
    assert "span has 12 attributes; the limit is 8" in result.partial_success.error_message
    assert stored(collector, request) == 1


def test_span_with_an_over_long_value_is_refused_not_truncated(collector):
    request = make_request(30_005, 3)
    spans = request.resource_spans[0].scope_spans[0].spans
    attr = spans[0].attributes.add()
    attr.key = "gen_ai.prompt"
    attr.value.array_value.values.add().string_value = "é" * 600  # 1200 bytes of UTF-8
    event = spans[1].events.add()
    event.name = "e"
    event_attr = event.attributes.add()
    event_attr.key, event_attr.value.bytes_value = "blob", b"x" * 2000
    response = post(collector, request.SerializeToString())
    result = ExportTraceServiceResponse.FromString(response.content)
    assert result.partial_success.rejected_spans == 2
    message = result.partial_success.error_message
    assert "span attribute 'gen_ai.prompt' has a value longer than 1024 bytes" in message
    assert "event 0 attribute 'blob' has a value longer than 1024 bytes" in message
    assert stored(collector, request) == 1


def test_resource_over_the_limit_refuses_its_spans(collector):
    request = make_request(30_006, 3)
    for i in range(9):
        attr = request.resource_spans[0].resource.attributes.add()
        attr.key, attr.value.string_value = f"r.{i}", "v"
    response = post(collector, request.SerializeToString())
    result = ExportTraceServiceResponse.FromString(response.content)
    assert result.partial_success.rejected_spans == 3
    assert "resource has 10 attributes" in result.partial_success.error_message


def test_too_many_spans_in_one_request_is_refused_whole(collector):
    request = make_request(30_007, 1001, tokens=False)
    response = post(collector, request.SerializeToString())
    assert response.status_code == 413
    status = status_of(response)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert "carries 1001 spans; the limit is 1000" in status.message
    assert stored(collector, request) == 0


@pytest.mark.parametrize(
    ("headers", "code", "text"),
    [
        ({"Content-Type": "text/plain"}, 415, "unsupported media type"),
        ({**PROTOBUF, "Content-Encoding": "br"}, 415, "unsupported Content-Encoding"),
        ({"Content-Type": "application/json"}, 400, "not valid JSON"),
    ],
)
def test_error_responses_are_statuses_naming_the_problem(collector, headers, code, text):
    response = post(collector, b"{not json", headers)
    assert response.status_code == code
    assert text in status_of(response).message


def test_get_on_the_traces_path_is_method_not_allowed(collector):
    with collector.client() as client:
        response = client.get("/v1/traces")
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert "use POST" in status_of(response).message


def test_unpaired_surrogate_in_json_is_a_bad_request_not_a_server_error(collector):
    # Found by the fuzzer: protobuf's JSON parser raised SystemError on this (an HTTP 500).
    body = b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":"\\ud800"}]}}]}'
    response = post(collector, body, {"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "unpaired surrogate" in status_of(response).message
