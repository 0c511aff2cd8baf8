"""Decoding and checking OTLP trace requests (protobuf and JSON); encoding responses and errors.

Both receivers (HTTP and gRPC) use these functions, so a body means the same on either.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, duration_pb2, json_format, message_factory
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = (PROTOBUF, JSON)


class BadRequest(ValueError):
    """The body cannot be decoded as an OTLP trace request; the message says why."""


@dataclass
class DecodedRequest:
    request: ExportTraceServiceRequest | None
    """The request (None when only its `lean` view was parsed: `decode_lean`)."""
    refusals: dict[tuple[int, int, int], str] = field(default_factory=dict)
    """Spans refused during decoding, by (resource, scope, span) position, with the reason."""
    body: bytes | None = None
    """The protobuf bytes the request was parsed from (None for OTLP/JSON): `lean_view` reuses them."""
    lean: "LeanRequest | None" = None
    """The request's `lean_view`, when it was made while decoding."""

    def lean_view(self) -> "LeanRequest":
        return self.lean if self.lean is not None else lean_view(self.request, self.body)


def not_protobuf(exc: Exception) -> BadRequest:
    """The BadRequest for a body (or a part of it) that protobuf cannot parse."""
    return BadRequest(f"body is not a valid OTLP protobuf ExportTraceServiceRequest: {exc}")


def decode(body: bytes, media_type: str) -> DecodedRequest:
    """Decode a (decompressed) body of the given media type; raise BadRequest on malformed input."""
    if media_type == PROTOBUF:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError) as exc:
            raise not_protobuf(exc) from None
        return DecodedRequest(request, body=body)
    try:
        return _decode_json(body)
    except RecursionError:
        raise BadRequest("OTLP/JSON body is nested too deeply") from None


def decode_lean(body: bytes, media_type: str) -> DecodedRequest:
    """`decode` for the receive path: a protobuf body is parsed only as its `lean_view` (``request``
    is None). The serialized parts it leaves (attributes, resources, scopes) are parsed when they
    are read; `normalize` reads every one of them, or parses the span whole (`full_span`), so a body
    that `decode` refuses is still refused whole, with BadRequest, before anything is stored."""
    if media_type != PROTOBUF:
        decoded = decode(body, media_type)
        decoded.lean = lean_view(decoded.request)
        return decoded
    try:
        return DecodedRequest(None, body=body, lean=LeanRequest.FromString(body))
    except (DecodeError, RecursionError) as exc:
        raise not_protobuf(exc) from None


def _decode_json(body: bytes) -> DecodedRequest:
    if not body:  # an empty request, as an empty protobuf body is; whitespace alone is no JSON document
        return DecodedRequest(ExportTraceServiceRequest())
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    return decode_json_document(doc)


def decode_json_document(doc) -> DecodedRequest:
    """Decode an already parsed OTLP/JSON document (hex IDs); raise BadRequest on a wrong shape."""
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


# --- the lean view: spans whose attributes stay serialized -------------------------------------------
# The same wire format read through mirror messages of ExportTraceServiceRequest, ResourceSpans,
# ScopeSpans, Span, Span.Event, Span.Link, Status, Resource and InstrumentationScope in which every
# other message field (attributes' KeyValues, a resource's entity references) is declared `bytes`.
# Parsing is then cheap and each attribute comes out as its own serialized KeyValue, which the
# normalizer maps to its JSON text once per distinct value instead of building Python objects per
# attribute. Field numbers and types are copied from the OTLP descriptors, never retyped. A message
# field that is repeated (attributes, events, links) reads the same either way; non-repeated message
# fields (status, resource, scope) stay messages, so repeated occurrences still merge.
_MIRRORED = (
    ExportTraceServiceRequest, trace_pb2.ResourceSpans, trace_pb2.ScopeSpans, trace_pb2.Span,
    trace_pb2.Span.Event, trace_pb2.Span.Link, trace_pb2.Status, resource_pb2.Resource,
    common_pb2.InstrumentationScope,
)
_LEAN_PACKAGE = "meritlens.lean"


def _lean_classes() -> dict[str, type]:
    F = descriptor_pb2.FieldDescriptorProto
    names = {m.DESCRIPTOR.full_name: m.DESCRIPTOR.name for m in _MIRRORED}
    lean_file = descriptor_pb2.FileDescriptorProto(
        name="meritlens/lean_otlp_trace.proto", package=_LEAN_PACKAGE, syntax="proto3")
    for message in _MIRRORED:
        proto = lean_file.message_type.add()
        message.DESCRIPTOR.CopyToProto(proto)
        del proto.nested_type[:], proto.enum_type[:]
        for field_proto in proto.field:
            if field_proto.type == F.TYPE_MESSAGE:
                target = names.get(field_proto.type_name.lstrip("."))
                if target is None:
                    field_proto.type = F.TYPE_BYTES
                    field_proto.ClearField("type_name")
                else:
                    field_proto.type_name = f".{_LEAN_PACKAGE}.{target}"
            elif field_proto.type == F.TYPE_ENUM:
                field_proto.type = F.TYPE_INT32  # proto3 enums are open: the same varint, kept as a number
                field_proto.ClearField("type_name")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(lean_file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_LEAN_PACKAGE}.{name}"))
            for name in names.values()}


LeanRequest = _lean_classes()["ExportTraceServiceRequest"]


def _full(message_class, lean_message):
    try:
        return message_class.FromString(lean_message.SerializeToString())
    except (DecodeError, RecursionError) as exc:
        raise not_protobuf(exc) from None


def full_resource(lean_resource) -> resource_pb2.Resource:
    """A lean view's resource, parsed whole; BadRequest if any part of it is not valid protobuf."""
    return _full(resource_pb2.Resource, lean_resource)


def full_scope(lean_scope) -> common_pb2.InstrumentationScope:
    """A lean view's scope, parsed whole; BadRequest if any part of it is not valid protobuf."""
    return _full(common_pb2.InstrumentationScope, lean_scope)


def full_span(lean_span) -> trace_pb2.Span:
    """A lean view's span, parsed whole; BadRequest if any part of it is not valid protobuf."""
    return _full(trace_pb2.Span, lean_span)


def lean_view(request: ExportTraceServiceRequest, body: bytes | None = None):
    """``request`` read as a `LeanRequest`: the same resource/scope/span positions, but each attribute,
    resource and scope still serialized. ``body`` (the bytes ``request`` was parsed from) saves
    serializing ``request`` again."""
    return LeanRequest.FromString(request.SerializeToString() if body is None else body)


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


def count_spans(request) -> int:
    """Spans in a request or its lean view."""
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


class SpanChecks:
    """The per-span limit checks of one request, asked span by span while its spans are walked.

    ``request``: the request's `lean_view`. ``serialized_size``: the length of the bytes it was
    parsed from, if known.
    """

    def __init__(self, request, limits: SpanLimits, serialized_size: int | None = None):
        self.limits = limits
        # Every string or bytes value is a contiguous part of the serialized message, so when the whole
        # request (or a span) is no longer than the limit, none of its texts can be: only counts, kinds
        # and status codes remain to check. This skips touching every attribute of ordinary requests.
        if serialized_size is None:
            serialized_size = request.ByteSize()
        self.texts_fit = serialized_size <= limits.max_attribute_bytes
        """No text of the request can be over the byte limit (it is no longer than the limit)."""
        self._resource_problems = [
            _attributes_problem("resource", full_resource(rs.resource).attributes, limits)
            for rs in request.resource_spans
        ]

    def resource_problem(self, ri: int) -> str | None:
        """Why every span of the request's ``ri``-th ResourceSpans is refused (its resource breaks a limit), or None."""
        return self._resource_problems[ri]

    def problem(self, position: tuple[int, int, int], span) -> str | None:
        """Why the span at (resource, scope, span) ``position`` breaks the limits, or None.

        ``span`` is that span in the `lean_view`.
        """
        problem = self._resource_problems[position[0]]
        if problem:
            return problem
        if self.texts_fit or span.ByteSize() <= self.limits.max_attribute_bytes:
            return _counts_problem(span, self.limits.max_attributes)
        return _span_problem(full_span(span), self.limits)


def _counts_problem(span, max_attributes: int) -> str | None:
    """`_span_problem` for a span none of whose texts can be over the byte limit (same order, same words).
    Reads only fields the decoded span and its lean view share."""
    if span.kind not in _SPAN_KINDS:
        return f"kind {span.kind} is not an OTLP SpanKind (0-5)"
    if span.status.code not in _STATUS_CODES:
        return f"status code {span.status.code} is not an OTLP StatusCode (0-2)"
    if len(span.attributes) > max_attributes:
        return f"span has {len(span.attributes)} attributes; the limit is {max_attributes}"
    for i, event in enumerate(span.events):
        if len(event.attributes) > max_attributes:
            return f"event {i} has {len(event.attributes)} attributes; the limit is {max_attributes}"
    for i, link in enumerate(span.links):
        if len(link.attributes) > max_attributes:
            return f"link {i} has {len(link.attributes)} attributes; the limit is {max_attributes}"
    return None


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
