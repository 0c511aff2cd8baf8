"""OTLP protobuf written field by field for the span generator (bench/spangen.py).

Building a message object per span costs ~35 µs in Python; a paced sender at tens of thousands of spans
a second must leave the CPU to the collector, so spans are written as bytes from fragments made once
(keys, constant attributes) and the few values that vary. Field numbers are those of
opentelemetry/proto/trace/v1/trace.proto and common.proto; tests/test_bench_spangen.py parses the
output with the official protobuf classes.
"""

from __future__ import annotations

import struct

_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack

# tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited)
SPAN_ATTRIBUTE = 0x4A  # Span.attributes = 9
EVENT_ATTRIBUTE = 0x1A  # Span.Event.attributes = 3
RESOURCE_ATTRIBUTE = 0x0A  # Resource.attributes = 1
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_ERROR = 2


def _varint_slow(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint_slow(i) for i in range(1 << 14)]


def varint(n: int) -> bytes:
    """A non-negative integer as a protobuf varint."""
    return _SMALL[n] if n < 16384 else _varint_slow(n)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (``tag`` < 128)."""
    return bytes((tag,)) + varint(len(payload)) + payload


def key(name: str) -> bytes:
    """A KeyValue's key field, made once per attribute name."""
    return field(0x0A, name.encode())


def kv(key_field: bytes, any_value: bytes, tag: int = SPAN_ATTRIBUTE) -> bytes:
    """A KeyValue as the repeated field ``tag`` of its parent."""
    body = key_field + b"\x12" + varint(len(any_value)) + any_value
    return bytes((tag,)) + varint(len(body)) + body


def string(value: str) -> bytes:
    return field(0x0A, value.encode())


def boolean(value: bool) -> bytes:
    return b"\x10\x01" if value else b"\x10\x00"


def integer(value: int) -> bytes:
    return b"\x18" + varint(value)


def double(value: float) -> bytes:
    return b"\x21" + _DOUBLE(value)


def strings(values: list[str]) -> bytes:
    """An AnyValue holding an array of strings."""
    return field(0x2A, b"".join(field(0x0A, string(v)) for v in values))


def span(trace_id: bytes, span_id: bytes, parent_id: bytes | None, name_field: bytes, kind: int, start_ns: int,
         end_ns: int, attributes: bytes, events: bytes = b"", status: bytes = b"") -> bytes:
    """A Span, already wrapped as ScopeSpans.spans (field 2). ``name_field``: `field(0x2A, name)`;
    ``events``: `event(...)` fields; ``status``: `error_status(...)` or empty."""
    body = (b"\x0a\x10" + trace_id + b"\x12\x08" + span_id + (b"\x22\x08" + parent_id if parent_id else b"")
            + name_field + b"\x30" + bytes((kind,)) + b"\x39" + _FIXED64(start_ns) + b"\x41" + _FIXED64(end_ns)
            + attributes + events + status)
    return b"\x12" + varint(len(body)) + body


def name(text: str) -> bytes:
    """Span.name (field 5)."""
    return field(0x2A, text.encode())


def event(time_ns: int, name_text: str, attributes: bytes) -> bytes:
    """Span.events (field 11): attributes made with ``tag=EVENT_ATTRIBUTE``."""
    return field(0x5A, b"\x09" + _FIXED64(time_ns) + field(0x12, name_text.encode()) + attributes)


def error_status(message: str) -> bytes:
    """Span.status (field 15) with code ERROR."""
    return field(0x7A, field(0x12, message.encode()) + b"\x18" + bytes((STATUS_ERROR,)))


def resource_spans(resource_attributes: bytes, scope_name: str, spans: list[bytes]) -> bytes:
    """One ExportTraceServiceRequest.resource_spans entry (field 1) holding one ScopeSpans."""
    scope_spans = field(0x0A, field(0x0A, scope_name.encode())) + b"".join(spans)
    return field(0x0A, field(0x0A, resource_attributes) + field(0x12, scope_spans))
