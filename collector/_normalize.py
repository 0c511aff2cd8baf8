"""Turning decoded OTLP spans into rows of the `spans` table.

Promoted fields go to typed columns through one mapping table; everything else is kept
losslessly as JSON. A promoted value of the wrong type, or not finite, or negative where a
count is meant, stays out of its column (NULL) and is kept with the other attributes: it is
never stored as something else. Spans that cannot be stored at all (bad IDs, bad times) are
refused one by one, with the reason.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field

import pyarrow as pa

from meritlens.analytics._schema import SPAN_COLUMN_NAMES
from meritlens.instrumentation import conventions as c

# Kinds of promoted value.
STR, COUNT, NONNEG_FLOAT, FLOAT, BOOL = "str", "count", "nonneg_float", "float", "bool"

# column -> (kind, attribute keys in priority order). The first key present with a valid value wins.
PROMOTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "target_id": (STR, (c.TARGET_ID,)),
    "role": (STR, (c.ROLE,)),
    "task_id": (STR, (c.TASK_ID,)),
    "case_id": (STR, (c.CASE_ID,)),
    "run_id": (STR, (c.RUN_ID,)),
    "assessment_id": (STR, (c.ASSESSMENT_ID,)),
    "operation": (STR, (c.GEN_AI_OPERATION_NAME,)),
    "provider": (STR, (c.GEN_AI_PROVIDER_NAME, c.GEN_AI_SYSTEM_DEPRECATED)),
    "request_model": (STR, (c.GEN_AI_REQUEST_MODEL,)),
    "response_model": (STR, (c.GEN_AI_RESPONSE_MODEL,)),
    "input_tokens": (COUNT, (c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_PROMPT_TOKENS_DEPRECATED)),
    "output_tokens": (COUNT, (c.GEN_AI_USAGE_OUTPUT_TOKENS, c.GEN_AI_USAGE_COMPLETION_TOKENS_DEPRECATED)),
    "cache_read_tokens": (COUNT, (c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,)),
    "cache_creation_tokens": (COUNT, (c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,)),
    "reasoning_tokens": (COUNT, (c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,)),
    "cost_usd": (NONNEG_FLOAT, (c.COST_USD,)),
    "ttft_s": (NONNEG_FLOAT, (c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,)),
    "retries": (COUNT, (c.RETRIES,)),
    "tool_calls": (COUNT, (c.TOOL_CALLS,)),
    "agent_step": (COUNT, (c.AGENT_STEP,)),
    "tool_name": (STR, (c.GEN_AI_TOOL_NAME,)),
    "outcome_success": (BOOL, (c.OUTCOME_SUCCESS,)),
    "quality_score": (FLOAT, (c.QUALITY_SCORE,)),
    "human_intervention": (BOOL, (c.HUMAN_INTERVENTION,)),
    "error_type": (STR, (c.ERROR_TYPE,)),
}
_KEY_TO_COLUMN: dict[str, tuple[str, str, int]] = {
    key: (column, kind, rank)
    for column, (kind, keys) in PROMOTED.items()
    for rank, key in enumerate(keys)
}
# Columns that may also come from the resource when the span does not carry them.
_FROM_RESOURCE = ("target_id", "role", "assessment_id", "run_id")
_ROLE_VALUES = frozenset(c.ROLES)

_INT64_MAX = 2**63 - 1


def any_value(v):
    """An OTLP AnyValue as a JSON-ready Python value (bytes as base64, non-finite floats as text)."""
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "double_value":
        d = v.double_value
        return d if math.isfinite(d) else repr(d)
    if kind == "bool_value":
        return v.bool_value
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return None


def _typed(kind: str, v):
    """The attribute's value if it is a valid value of ``kind``, else None."""
    which = v.WhichOneof("value")
    if kind == STR:
        return v.string_value if which == "string_value" else None
    if kind == BOOL:
        return v.bool_value if which == "bool_value" else None
    if which == "int_value":
        number = v.int_value
    elif which == "double_value":
        number = v.double_value
        if not math.isfinite(number):
            return None
    else:
        return None
    if kind == COUNT:
        if number < 0 or number != int(number) or number > _INT64_MAX:
            return None
        return int(number)
    if kind == NONNEG_FLOAT and number < 0:
        return None
    return float(number)


@dataclass
class SpanBatch:
    """Normalized rows ready for the store, and the spans refused with their reasons."""

    columns: dict[str, list] = field(default_factory=lambda: {name: [] for name in _ROW_COLUMNS})
    refused: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.columns["span_id"])

    def to_arrow(self) -> pa.Table:
        return pa.table({name: pa.array(self.columns[name], type=_ARROW_TYPES[name]) for name in _ROW_COLUMNS})


_ROW_COLUMNS = tuple(name for name in SPAN_COLUMN_NAMES if name != "received_at")
_TS = pa.timestamp("us", tz="UTC")
_ARROW_TYPES: dict[str, pa.DataType] = {name: pa.string() for name in _ROW_COLUMNS}
_ARROW_TYPES.update(
    kind=pa.int8(), status_code=pa.int8(),
    start_unix_nano=pa.int64(), end_unix_nano=pa.int64(),
    start_time=_TS, end_time=_TS, duration_s=pa.float64(),
)
for _column, (_kind, _keys) in PROMOTED.items():
    _ARROW_TYPES[_column] = {
        STR: pa.string(), COUNT: pa.int64(), NONNEG_FLOAT: pa.float64(), FLOAT: pa.float64(), BOOL: pa.bool_()
    }[_kind]
_ARROW_TYPES.update(retries=pa.int32(), tool_calls=pa.int32(), agent_step=pa.int32())


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
    """Fill ``into`` (column -> (rank, value)) from promoted keys; return the remaining attributes."""
    rest = {}
    for kv in attributes:
        key = kv.key
        hit = _KEY_TO_COLUMN.get(key)
        if hit is not None:
            column, kind, rank = hit
            value = _typed(kind, kv.value)
            if column == "role" and value not in _ROLE_VALUES:
                value = None
            if value is not None:
                held = into.get(column)
                if held is None or rank < held[0]:
                    into[column] = (rank, value)
                continue
        rest[key] = any_value(kv.value)
    return rest


def _dumps(obj) -> str | None:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False) if obj else None


def normalize(request, refusals: dict[tuple[int, int, int], str] | None = None) -> SpanBatch:
    """Normalize an ExportTraceServiceRequest into a SpanBatch."""
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
                for column in promoted_columns:
                    hit = found.get(column)
                    cols[column].append(hit[1] if hit is not None else None)
                if "role" not in found and c.ROLE not in rest:
                    # No role given: the target's own call. A role given but invalid stays NULL
                    # (kept in attributes), so a mistyped orchestration span is never counted.
                    cols["role"][-1] = c.ROLE_APPLICATION
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
