"""OTLP/gRPC: the real OpenTelemetry gRPC exporter against the real collector, compared with OTLP/HTTP."""

from __future__ import annotations

import asyncio
import gzip

import duckdb
import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

from meritlens.analytics._schema import SPAN_COLUMN_NAMES, WINDOW_COLUMN_NAMES
from tests.collector.collector_proc import CollectorProcess, assert_same_windows, make_request, span_ids
from tests.otlp_builders import sdk_spans

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _sixty_calls(tracer) -> None:
    for i in range(60):
        attributes = {
            "meritlens.target.id": f"bot/{i % 2}",
            "meritlens.task.id": f"task-{i // 3}",
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m-1",
            "gen_ai.usage.input_tokens": 100 + i,
            "gen_ai.usage.output_tokens": 10 + i % 4,
            "meritlens.cost.usd": 0.001 * (i + 1),
            "note": ["a", "b"],
        }
        if i % 5 == 0:
            attributes["meritlens.assessment.id"] = "arm-a"
        with tracer.start_as_current_span("chat m-1", kind=SpanKind.CLIENT, attributes=attributes) as span:
            span.add_event("first_token", {"index": i})


def _rows(path):
    columns = [c for c in SPAN_COLUMN_NAMES if c != "received_at"]
    window_columns = [c for c in WINDOW_COLUMN_NAMES if c != "computed_at"]
    con = duckdb.connect(str(path), read_only=True)
    try:
        spans = con.execute(f"SELECT {', '.join(columns)} FROM spans ORDER BY trace_id, span_id").fetchall()
        windows = con.execute(
            f"SELECT {', '.join(window_columns)} FROM windows ORDER BY target_id, metric, scope"
        ).fetchall()
    finally:
        con.close()
    return spans, windows


def test_grpc_exporter_stores_the_same_rows_and_windows_as_the_http_exporter(tmp_path):
    spans = sdk_spans(_sixty_calls, Resource.create({"service.name": "grpc-vs-http"}))
    (tmp_path / "grpc").mkdir()
    (tmp_path / "http").mkdir()
    via_grpc = CollectorProcess(tmp_path / "grpc" / "spans.duckdb")
    via_http = CollectorProcess(tmp_path / "http" / "spans.duckdb")
    with via_grpc, via_http:
        grpc_exporter = GrpcSpanExporter(
            endpoint=via_grpc.grpc_target, insecure=True, compression=grpc.Compression.Gzip, timeout=10
        )
        http_exporter = HttpSpanExporter(
            endpoint=f"{via_http.url}/v1/traces", compression=HttpCompression.Gzip, timeout=10
        )
        assert grpc_exporter.export(spans[:30]) == SpanExportResult.SUCCESS
        assert grpc_exporter.export(spans[30:]) == SpanExportResult.SUCCESS
        assert grpc_exporter.export(spans[:10]) == SpanExportResult.SUCCESS  # a retry counts once
        assert http_exporter.export(spans) == SpanExportResult.SUCCESS
        grpc_exporter.shutdown()
        http_exporter.shutdown()
    grpc_spans, grpc_windows = _rows(via_grpc.db)
    http_spans, http_windows = _rows(via_http.db)
    assert len(grpc_spans) == len(spans) == 60
    assert grpc_spans == http_spans
    measured = [w for w in grpc_windows if w[WINDOW_COLUMN_NAMES.index("state")] == "measured"]
    assert {w[0] for w in measured} == {"bot/0", "bot/1"}
    assert {w[2] for w in grpc_windows} == {"all", "arm-a"}
    assert_same_windows(grpc_windows, http_windows)


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    with CollectorProcess(tmp_path_factory.mktemp("grpc") / "spans.duckdb",
                          args=("--max-body-bytes", "1MiB")) as running:
        yield running


def _status_of(error: grpc.RpcError) -> status_pb2.Status:
    details = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin")
    assert details is not None, "no google.rpc.Status in the trailing metadata"
    return status_pb2.Status.FromString(details)


def test_undecodable_body_is_invalid_argument_with_a_status(collector):
    with grpc.insecure_channel(collector.grpc_target) as channel:
        export = channel.unary_unary(EXPORT)
        with pytest.raises(grpc.RpcError) as caught:
            export(b"\x0a\xff\xff\xff\xff\x0f", timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid OTLP protobuf" in caught.value.details()
    status = _status_of(caught.value)
    assert status.code == code_pb2.INVALID_ARGUMENT and "not a valid OTLP protobuf" in status.message


def test_invalid_spans_are_refused_one_by_one_as_partial_success(collector):
    request = make_request(9000, 4)
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[1].trace_id = bytes(16)
    spans[2].kind = 77
    with grpc.insecure_channel(collector.grpc_target) as channel:
        export = channel.unary_unary(
            EXPORT, response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString
        )
        response = export(request.SerializeToString(), timeout=10)
    assert response.partial_success.rejected_spans == 2
    assert "trace_id must be 16 bytes and not all zero" in response.partial_success.error_message
    assert "kind 77 is not an OTLP SpanKind" in response.partial_success.error_message
    stored = collector.sql(
        f"SELECT count(*) FROM spans WHERE span_id IN ('{spans[0].span_id.hex()}', '{spans[3].span_id.hex()}',"
        f" '{spans[1].span_id.hex()}', '{spans[2].span_id.hex()}')"
    )
    assert stored["rows"] == [[2]]


def test_message_over_the_limit_after_decompression_is_resource_exhausted(collector):
    request = make_request(9001, 1)
    attr = request.resource_spans[0].scope_spans[0].spans[0].attributes.add()
    attr.key, attr.value.string_value = "big", "x" * (3 * 1024 * 1024)
    body = request.SerializeToString()
    assert len(gzip.compress(body)) < 64 * 1024  # small on the wire, 3 MiB decompressed
    with grpc.insecure_channel(collector.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(EXPORT)(body, timeout=10, compression=grpc.Compression.Gzip)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with grpc.insecure_channel(collector.grpc_target) as channel:  # and the receiver still works
        assert channel.unary_unary(EXPORT)(make_request(9002, 2).SerializeToString(), timeout=10) == b""


def test_an_export_call_with_two_messages_is_invalid_argument(collector):
    with grpc.insecure_channel(collector.grpc_target) as channel:
        export = channel.stream_unary(EXPORT)
        with pytest.raises(grpc.RpcError) as caught:
            export(iter([make_request(9101, 1).SerializeToString(), make_request(9102, 1).SerializeToString()]),
                   timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "exactly one" in caught.value.details()
        assert export(iter([make_request(9103, 1).SerializeToString()]), timeout=10) == b""
    ids = ", ".join(f"'{span_ids(batch, 0)[1].hex()}'" for batch in (9101, 9102, 9103))
    stored = collector.sql(f"SELECT span_id FROM spans WHERE span_id IN ({ids})")
    assert stored["rows"] == [[span_ids(9103, 0)[1].hex()]]


@pytest.mark.parametrize("limit, spans, args, reason", [
    # The in-flight share (123MiB) holds ~11 calls of 5,000 spans (2 KiB each, ~10 MiB), and 6 calls whose
    # messages are being read (each holds the largest message, 20MiB, until it is read).
    ("in-flight bytes", 5000, ("--max-spans-per-request", "5000", "--memory-limit", "493MiB",
                               "--grpc-max-concurrent-rpcs", "64"), "in-flight bytes"),
    # One call at a time; bytes for all of them. grpc.aio's own limit answered RESOURCE_EXHAUSTED here.
    ("concurrent calls", 100, ("--grpc-max-concurrent-rpcs", "1"), "--grpc-max-concurrent-rpcs"),
], ids=["in-flight-bytes", "concurrent-calls"])
def test_overload_answers_unavailable_with_retry_info_and_loses_no_acknowledged_span(tmp_path, limit, spans, args,
                                                                                    reason):
    requests = {b: make_request(20_000 + b, spans).SerializeToString() for b in range(40)}

    async def send_all(target: str):
        acked, unavailable = set(), []
        async with grpc.aio.insecure_channel(target) as channel:
            export = channel.unary_unary(EXPORT)

            async def send(batch: int):
                for _ in range(200):
                    try:
                        await export(requests[batch], timeout=60)
                        acked.add(batch)
                        return
                    except grpc.aio.AioRpcError as error:
                        assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                        unavailable.append(error)
                        await asyncio.sleep(0.05)

            await asyncio.gather(*(send(b) for b in requests))
        return acked, unavailable

    with CollectorProcess(tmp_path / "busy.duckdb", args=args) as busy:
        acked, unavailable = asyncio.run(send_all(busy.grpc_target))
        assert acked == set(requests)
        count = busy.sql("SELECT count(*) FROM spans")["rows"][0][0]
    assert unavailable, f"40 concurrent requests never exceeded the {limit} limit"
    error = unavailable[0]
    metadata = dict(error.trailing_metadata())
    retry = error_details_pb2.RetryInfo.FromString(metadata["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds == 1
    status = _status_of(error)
    assert status.code == code_pb2.UNAVAILABLE
    assert status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    assert reason in error.details()
    assert count == 40 * spans
