"""Building OTLP trace requests for tests (protobuf messages and OTLP/JSON documents), and spans
made by the OpenTelemetry SDK for its real exporters to send."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer


def sdk_spans(write: Callable[[Tracer], None], resource: Resource | None = None) -> tuple[ReadableSpan, ...]:
    """The spans ``write`` makes with a tracer of a real SDK provider, finished and kept in memory."""
    kept = InMemorySpanExporter()
    provider = TracerProvider() if resource is None else TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(kept))
    write(provider.get_tracer("tests"))
    provider.shutdown()
    return kept.get_finished_spans()


def any_value(value) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        out = AnyValue()
        out.array_value.values.extend(any_value(v) for v in value)
        return out
    return AnyValue(string_value=str(value))


def make_span(attributes: dict, *, trace_id: bytes | None = None, span_id: bytes | None = None,
              start_ns: int | None = None, duration_s: float = 0.5, name: str = "chat m",
              parent_span_id: bytes = b"") -> Span:
    start = start_ns or time.time_ns()
    span = Span(
        trace_id=trace_id or os.urandom(16),
        span_id=span_id or os.urandom(8),
        parent_span_id=parent_span_id,
        name=name,
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start,
        end_time_unix_nano=start + int(duration_s * 1e9),
    )
    span.attributes.extend(KeyValue(key=k, value=any_value(v)) for k, v in attributes.items())
    return span


def make_request(spans: list[Span], resource: dict | None = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend(KeyValue(key=k, value=any_value(v)) for k, v in (resource or {}).items())
    ss = rs.scope_spans.add()
    ss.scope.name = "tests"
    ss.spans.extend(spans)
    return request


def json_span(attributes: list[dict], *, trace_id: str | None = None, span_id: str | None = None,
              start_ns: int | None = None, duration_s: float = 0.25) -> dict:
    start = start_ns or time.time_ns()
    return {
        "traceId": trace_id or os.urandom(16).hex(),
        "spanId": span_id or os.urandom(8).hex(),
        "name": "chat m",
        "kind": 3,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": start + int(duration_s * 1e9),
        "attributes": attributes,
        "status": {"code": 0},
    }


def json_request(spans: list[dict], resource_attributes: list[dict] | None = None) -> dict:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource_attributes or []},
                "scopeSpans": [{"scope": {"name": "tests"}, "spans": spans}],
            }
        ]
    }


# --- raw protobuf wire format, for bodies the message classes cannot produce ---------------------
def wire_varint(n: int) -> bytes:
    """``n`` as a protobuf varint."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def wire_tag(number: int, wire_type: int) -> bytes:
    """The key of field ``number`` with ``wire_type``."""
    return wire_varint(number << 3 | wire_type)


def wire_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return wire_tag(number, 2) + wire_varint(len(payload)) + payload
