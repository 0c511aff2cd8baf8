"""Decoding OTLP trace requests (protobuf and JSON) and encoding responses and errors."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
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
        except DecodeError as exc:
            raise BadRequest(f"body is not a valid OTLP protobuf ExportTraceServiceRequest: {exc}") from None
        return DecodedRequest(request)
    return _decode_json(body)


def _decode_json(body: bytes) -> DecodedRequest:
    if not body.strip():
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
    refusals: dict[tuple[int, int, int], str] = {}
    try:
        _hex_ids_to_base64(doc, refusals)
    except (TypeError, AttributeError) as exc:
        raise BadRequest(f"OTLP/JSON body has an unexpected shape: {exc}") from None
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
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


def encode_response(media_type: str, rejected: int, message: str) -> bytes:
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if media_type == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()


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


def encode_status(media_type: str, http_status: int, message: str) -> bytes:
    """A `google.rpc.Status` body for an error response, in the request's encoding."""
    status = status_pb2.Status(code=HTTP_TO_RPC_CODE.get(http_status, code_pb2.UNKNOWN), message=message)
    if media_type == PROTOBUF:
        return status.SerializeToString()
    return json_format.MessageToJson(status, indent=None).encode()
