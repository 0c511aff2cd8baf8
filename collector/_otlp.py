"""Decoding and checking OTLP trace requests (protobuf and JSON); encoding responses and errors.

Both receivers (HTTP and gRPC) use these functions, so a body means the same on either.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from google.protobuf import any_pb2, duration_pb2, json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = (PROTOBUF, JSON)


class BadRequest(ValueError):
    """The body cannot be decoded as an OTLP trace request; the message says why."""


@dataclass
class DecodedRequest:
    request: ExportTraceServiceRequest
    refusals: dict[tuple[int, int, int], str] = field(default_factory=dict)
    """Spans refused during decoding, by (resource, scope, span) position, with the reason."""


def decode(body: bytes, media_type: str) -> DecodedRequest:
    """Decode a (decompressed) body of the given media type; raise BadRequest on malformed input."""
    if media_type == PROTOBUF:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError) as exc:
            raise BadRequest(f"body is not a valid OTLP protobuf ExportTraceServiceRequest: {exc}") from None
        return DecodedRequest(request)
    try:
        return _decode_json(body)
    except RecursionError:
        raise BadRequest("OTLP/JSON body is nested too deeply") from None


def _decode_json(body: bytes) -> DecodedRequest:
    if not body.strip():
        return DecodedRequest(ExportTraceServiceRequest())
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"OTLP/JSON body must be an object, got {type(doc).__name__}")
    try:
        # A lone \uD800-\uDFFF escape is valid JSON but not text; protobuf's parser fails on it
        # in ways it does not report as a parse error.
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("OTLP/JSON body contains an unpaired surrogate escape (\\uD800-\\uDFFF)") from None
    refusals: dict[tuple[int, int, int], str] = {}
    try:
        _hex_ids_to_base64(doc, refusals)
    except (TypeError, AttributeError) as exc:
        raise BadRequest(f"OTLP/JSON body has an unexpected shape: {exc}") from None
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, SystemError) as exc:
        raise BadRequest(f"body is not a valid OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    return DecodedRequest(request, refusals)


def _get(obj: dict, camel: str, snake: str):
    return obj.get(camel, obj.get(snake))


def _list(obj, camel: str, snake: str) -> list:
    if not isinstance(obj, dict):
        raise TypeError(f"expected an object, got {type(obj).__name__}")
    value = _get(obj, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"'{camel}' must be an array, got {type(value).__name__}")
    return value


_ID_FIELDS = (("traceId", "trace_id"), ("spanId", "span_id"), ("parentSpanId", "parent_span_id"))


def _hex_ids_to_base64(doc: dict, refusals: dict) -> None:
    """OTLP/JSON carries IDs as hex; protobuf's JSON mapping expects base64 for bytes fields."""
    for ri, rs in enumerate(_list(doc, "resourceSpans", "resource_spans")):
        for si, ss in enumerate(_list(rs, "scopeSpans", "scope_spans")):
            for pi, span in enumerate(_list(ss, "spans", "spans")):
                if not isinstance(span, dict):
                    raise TypeError(f"span {pi} must be an object")
                problem = _convert_ids(span)
                for link in _list(span, "links", "links"):
                    problem = problem or _convert_ids(link)
                if problem:
                    refusals[(ri, si, pi)] = problem


def _convert_ids(obj: dict) -> str | None:
    problem = None
    for camel, snake in _ID_FIELDS:
        key = camel if camel in obj else snake if snake in obj else None
        if key is None:
            continue
        raw = obj[key]
        try:
            if not isinstance(raw, str):
                raise ValueError
            obj[key] = base64.b64encode(bytes.fromhex(raw)).decode()
        except ValueError:
            problem = problem or f"{camel} {raw!r} is not a hex string"
            obj[key] = ""
    return problem


# --- checks on decoded spans -------------------------------------------------------------------------
_SPAN_KINDS = range(0, 6)  # UNSPECIFIED .. CONSUMER
_STATUS_CODES = range(0, 3)  # UNSET, OK, ERROR


@dataclass(frozen=True)
class SpanLimits:
    """Per-span limits; a span over any of them is refused (partial success), never truncated."""

    max_attributes: int
    """Attributes of a span, of each of its events and links, and of its resource."""
    max_attribute_bytes: int
    """Bytes (UTF-8) of any one string or bytes value, attribute key, span, event or status text."""


def count_spans(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def check_spans(request: ExportTraceServiceRequest, limits: SpanLimits, refusals: dict) -> None:
    """Add to ``refusals`` every span that breaks ``limits`` or carries a value the store cannot hold."""
    for ri, rs in enumerate(request.resource_spans):
        resource_problem = _attributes_problem("resource", rs.resource.attributes, limits)
        for si, ss in enumerate(rs.scope_spans):
            for pi, span in enumerate(ss.spans):
                if (ri, si, pi) in refusals:
                    continue
                problem = resource_problem or _span_problem(span, limits)
                if problem:
                    refusals[(ri, si, pi)] = problem


def _span_problem(span, limits: SpanLimits) -> str | None:
    if span.kind not in _SPAN_KINDS:
        return f"kind {span.kind} is not an OTLP SpanKind (0-5)"
    if span.status.code not in _STATUS_CODES:
        return f"status code {span.status.code} is not an OTLP StatusCode (0-2)"
    for what, text in (("name", span.name), ("status message", span.status.message)):
        if _utf8_len(text) > limits.max_attribute_bytes:
            return f"span {what} is longer than {limits.max_attribute_bytes} bytes"
    problem = _attributes_problem("span", span.attributes, limits)
    for i, event in enumerate(span.events):
        if problem:
            break
        if _utf8_len(event.name) > limits.max_attribute_bytes:
            problem = f"event {i} name is longer than {limits.max_attribute_bytes} bytes"
        else:
            problem = _attributes_problem(f"event {i}", event.attributes, limits)
    for i, link in enumerate(span.links):
        if problem:
            break
        problem = _attributes_problem(f"link {i}", link.attributes, limits)
    return problem


def _attributes_problem(owner: str, attributes, limits: SpanLimits) -> str | None:
    if len(attributes) > limits.max_attributes:
        return f"{owner} has {len(attributes)} attributes; the limit is {limits.max_attributes}"
    for kv in attributes:
        if _utf8_len(kv.key) > limits.max_attribute_bytes:
            return f"{owner} attribute key {kv.key[:40]!r}... is longer than {limits.max_attribute_bytes} bytes"
        if _value_too_long(kv.value, limits.max_attribute_bytes):
            return f"{owner} attribute {kv.key[:100]!r} has a value longer than {limits.max_attribute_bytes} bytes"
    return None


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _value_too_long(value, limit: int) -> bool:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return _utf8_len(value.string_value) > limit
    if kind == "bytes_value":
        return len(value.bytes_value) > limit
    if kind == "array_value":
        return any(_value_too_long(v, limit) for v in value.array_value.values)
    if kind == "kvlist_value":
        return any(
            _utf8_len(kv.key) > limit or _value_too_long(kv.value, limit) for kv in value.kvlist_value.values
        )
    return False


# --- responses ------------------------------------------------------------------------------------
def encode_response(media_type: str, rejected: int, message: str) -> bytes:
    """An ExportTraceServiceResponse (with partial_success when spans were refused) in ``media_type``."""
    response = export_response(rejected, message)
    if media_type == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()


def export_response(rejected: int, message: str) -> ExportTraceServiceResponse:
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return response


HTTP_TO_RPC_CODE = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    500: code_pb2.INTERNAL,
    503: code_pb2.UNAVAILABLE,
}


def encode_status(
    media_type: str, http_status: int, message: str, *, rpc_code: int | None = None,
    retry_after_s: float | None = None,
) -> bytes:
    """A `google.rpc.Status` body for an error response, in the request's encoding."""
    if rpc_code is None:
        rpc_code = HTTP_TO_RPC_CODE.get(http_status, code_pb2.UNKNOWN)
    status = rpc_status(rpc_code, message, retry_after_s)
    if media_type == PROTOBUF:
        return status.SerializeToString()
    return json_format.MessageToJson(status, indent=None).encode()


def retry_info(retry_after_s: float) -> error_details_pb2.RetryInfo:
    seconds = int(retry_after_s)
    return error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=seconds, nanos=int((retry_after_s - seconds) * 1e9))
    )


def rpc_status(rpc_code: int, message: str, retry_after_s: float | None = None) -> status_pb2.Status:
    """A `google.rpc.Status`; with ``retry_after_s`` it carries a `google.rpc.RetryInfo` detail."""
    status = status_pb2.Status(code=rpc_code, message=message)
    if retry_after_s is not None:
        detail = any_pb2.Any()
        detail.Pack(retry_info(retry_after_s))
        status.details.append(detail)
    return status
