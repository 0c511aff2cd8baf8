"""The obvious design of decode -> check -> normalize -> Arrow, kept as the baseline of bench/normalize.py.

A copy of the collector's walk as it was at main `6e647a2` (collector/_normalize.py `normalize` and
collector/_otlp.py `check_spans`): every attribute becomes Python objects, the leftover attributes a
dict that is JSON-encoded per span, every value is appended to per-column Python lists. The rules -
convention mappings (PROMOTED and the key table built from it), value validity (`_typed`), the JSON form
of a value (`any_value`), options, pricing and the row schema - are imported from the collector (their
one home), so both implementations normalize by the same rules and only the walk differs.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from meritlens.collector._normalize import (
    _ARROW_TYPES, _FROM_RESOURCE, _INT64_MAX, _KEY_TO_SOURCE, _ROLE_VALUES, _ROW_COLUMNS, FIRST_CHUNK_EVENTS,
    PROMOTED, NormalizeOptions, _fallback_target, _price, _typed, any_value,
)
from meritlens.instrumentation import conventions as c


class SpanBatch:
    def __init__(self):
        self.columns = {name: [] for name in _ROW_COLUMNS}
        self.refused: list[str] = []

    @property
    def size(self) -> int:
        return len(self.columns["span_id"])

    def to_arrow(self) -> pa.Table:
        return pa.table({name: pa.array(self.columns[name], type=_ARROW_TYPES[name]) for name in _ROW_COLUMNS})


def _valid_id(raw: bytes, size: int) -> bool:
    return len(raw) == size and raw != bytes(size)


def _span_problem(span) -> str | None:
    if not _valid_id(span.trace_id, 16):
        return f"trace_id must be 16 bytes and not all zero (got {len(span.trace_id)} bytes)"
    if not _valid_id(span.span_id, 8):
        return f"span_id must be 8 bytes and not all zero (got {len(span.span_id)} bytes)"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return f"parent_span_id must be empty or 8 bytes (got {len(span.parent_span_id)} bytes)"
    if span.start_time_unix_nano == 0 or span.end_time_unix_nano == 0:
        return "start_time_unix_nano and end_time_unix_nano are required"
    if span.end_time_unix_nano < span.start_time_unix_nano:
        return "end_time_unix_nano is before start_time_unix_nano"
    if span.end_time_unix_nano > _INT64_MAX:
        return "end_time_unix_nano is out of range"
    return None


def _promote(attributes, into: dict) -> dict:
    rest = {}
    for kv in attributes:
        key = kv.key
        v = kv.value
        which = v.WhichOneof("value")
        source = _KEY_TO_SOURCE.get(key)
        if source is not None:
            value = _typed(source, v, which)
            if source.values is not None:
                value = source.values.get(value)
            elif source.column == "role" and value not in _ROLE_VALUES:
                value = None
            if value is not None:
                held = into.get(source.column)
                if held is None or source.rank < held[0]:
                    into[source.column] = (source.rank, value, key, v)
                    if held is not None and held[2] not in rest:
                        rest[held[2]] = any_value(held[3])
                    if source.values is None:
                        continue
        rest[key] = v.string_value if which == "string_value" else any_value(v, which)
    return rest


def _dumps(obj) -> str | None:
    return orjson.dumps(obj).decode() if obj else None


def _first_chunk_seconds(span) -> float | None:
    for event in span.events:
        if event.name in FIRST_CHUNK_EVENTS and event.time_unix_nano >= span.start_time_unix_nano:
            return (event.time_unix_nano - span.start_time_unix_nano) / 1e9
    return None


def normalize(request, refusals=None, options: NormalizeOptions = NormalizeOptions()) -> SpanBatch:
    batch = SpanBatch()
    cols = batch.columns
    refusals = refusals or {}
    promoted_columns = tuple(PROMOTED)
    for ri, rs in enumerate(request.resource_spans):
        resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
        resource_promoted: dict = {}
        _promote(rs.resource.attributes, resource_promoted)
        service_name = resource.get(c.SERVICE_NAME) if isinstance(resource.get(c.SERVICE_NAME), str) else None
        resource_json = _dumps(resource)
        for si, ss in enumerate(rs.scope_spans):
            scope_name = ss.scope.name or None
            for pi, span in enumerate(ss.spans):
                problem = refusals.get((ri, si, pi)) or _span_problem(span)
                if problem:
                    batch.refused.append(f"span {span.span_id.hex() or '?'} in trace {span.trace_id.hex() or '?'}: {problem}")
                    continue
                found: dict = {}
                rest = _promote(span.attributes, found)
                for column in _FROM_RESOURCE:
                    if column not in found and column in resource_promoted:
                        found[column] = resource_promoted[column]
                values = {column: hit[1] for column, hit in found.items()}
                if "role" not in values and c.ROLE not in rest:
                    values["role"] = c.ROLE_APPLICATION
                if "ttft_s" not in values and span.events:
                    values["ttft_s"] = _first_chunk_seconds(span)
                if "target_id" not in values and options.target_fallback:
                    values["target_id"] = _fallback_target(options.target_fallback, values, service_name, scope_name)
                if "cost_usd" not in values and options.price is not None and c.COST_USD not in rest:
                    cost = _price(options.price, values, span.end_time_unix_nano)
                    if cost is not None:
                        values["cost_usd"] = cost
                        rest[c.COST_PRICED_BY] = "collector"
                for column in promoted_columns:
                    cols[column].append(values.get(column))
                start, end = span.start_time_unix_nano, span.end_time_unix_nano
                cols["trace_id"].append(span.trace_id.hex())
                cols["span_id"].append(span.span_id.hex())
                cols["parent_span_id"].append(span.parent_span_id.hex() if span.parent_span_id else None)
                cols["name"].append(span.name)
                cols["kind"].append(span.kind)
                cols["start_unix_nano"].append(start)
                cols["end_unix_nano"].append(end)
                cols["start_time"].append(start // 1000)
                cols["end_time"].append(end // 1000)
                cols["duration_s"].append((end - start) / 1e9)
                cols["status_code"].append(span.status.code)
                cols["status_message"].append(span.status.message or None)
                cols["service_name"].append(service_name)
                cols["scope_name"].append(scope_name)
                cols["attributes"].append(_dumps(rest))
                cols["resource"].append(resource_json)
                cols["events"].append(_dumps([
                    {"name": e.name, "time_unix_nano": e.time_unix_nano,
                     "attributes": {kv.key: any_value(kv.value) for kv in e.attributes}}
                    for e in span.events
                ]))
                cols["links"].append(_dumps([
                    {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                     "attributes": {kv.key: any_value(kv.value) for kv in link.attributes}}
                    for link in span.links
                ]))
    return batch


# --- the per-span limit checks of collector/_otlp.py `check_spans`, as they were -----------------------
_SPAN_KINDS = range(0, 6)
_STATUS_CODES = range(0, 3)


def check_spans(request, limits, refusals: dict) -> None:
    for ri, rs in enumerate(request.resource_spans):
        resource_problem = _attributes_problem("resource", rs.resource.attributes, limits)
        for si, ss in enumerate(rs.scope_spans):
            for pi, span in enumerate(ss.spans):
                if (ri, si, pi) in refusals:
                    continue
                problem = resource_problem or _limits_problem(span, limits)
                if problem:
                    refusals[(ri, si, pi)] = problem


def _limits_problem(span, limits) -> str | None:
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


def _attributes_problem(owner: str, attributes, limits) -> str | None:
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
