"""Turning decoded OTLP spans into rows of the `spans` table: the row layout and the Python walk.

Promoted fields go to typed columns through one mapping table; everything else is kept
losslessly as JSON. A promoted value of the wrong type, or not finite, or negative where a
count is meant, stays out of its column (NULL) and is kept with the other attributes: it is
never stored as something else. Spans that cannot be stored at all (bad IDs, bad times) are
refused one by one, with the reason.

How it stays cheap: spans are read through the lean view of the request (`_otlp.lean_view`), where
each attribute is still its serialized KeyValue. Each distinct serialized attribute is decoded once
into an `_Attribute` (its key, its JSON text, and the typed column value it may promote to) and
remembered in a bounded cache, so a span's attributes cost a dictionary look-up each, and its
`attributes` JSON is the joined texts of the attributes that stay. Rows are tuples; the Arrow
columns are built once per batch, the time columns by Arrow casts from the nanosecond columns.

On the receive path a protobuf body goes to the native scanner (`collector/process/_spanscan.c`,
driven by `_scan`; `_normalize.normalize` picks the way), which does the same per-span work straight
from the body's bytes into Arrow buffers, with the same attribute cache; `_span_row` below is the
reference it is tested against, and it takes every span the scanner leaves (invalid IDs or times,
limits to check, links) and every body it cannot walk.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from meritlens.analytics.engine import SPAN_COLUMN_NAMES, SPAN_COLUMNS
from meritlens.collector.process import _otlp
from meritlens.collector.process._options import NormalizeOptions, fallback_target, price_span
from meritlens.instrumentation import conventions as c

# Kinds of promoted value.
STR, COUNT, NONNEG_FLOAT, FLOAT, BOOL = "str", "count", "nonneg_float", "float", "bool"

# Where each typed column comes from: the one table of convention mappings. For every column, the
# sources in priority order: our names and the current GenAI names first, then the deprecated GenAI
# names, OpenInference and OpenLLMetry. A source is an attribute key, or (key, {value: column value})
# when the column is derived from another convention's vocabulary; derived sources are kept in
# `attributes` too, since the mapping cannot be inverted. Token counts follow the GenAI rule
# (input includes cached tokens, output includes reasoning) in every convention listed here.
_OPENINFERENCE_OPERATIONS = {"LLM": "chat", "EMBEDDING": "embeddings", "TOOL": "execute_tool", "AGENT": "invoke_agent"}
_OPENLLMETRY_OPERATIONS = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings"}
PROMOTED: dict[str, tuple[str, tuple]] = {
    "target_id": (STR, (c.TARGET_ID,)),
    "role": (STR, (c.ROLE,)),
    "task_id": (STR, (c.TASK_ID,)),
    "case_id": (STR, (c.CASE_ID,)),
    "run_id": (STR, (c.RUN_ID,)),
    "assessment_id": (STR, (c.ASSESSMENT_ID,)),
    "operation": (STR, (c.GEN_AI_OPERATION_NAME,
                        (c.OPENINFERENCE_SPAN_KIND, _OPENINFERENCE_OPERATIONS),
                        (c.OPENLLMETRY_REQUEST_TYPE, _OPENLLMETRY_OPERATIONS))),
    "provider": (STR, (c.GEN_AI_PROVIDER_NAME, c.GEN_AI_SYSTEM_DEPRECATED, c.OPENINFERENCE_PROVIDER,
                       c.OPENINFERENCE_SYSTEM)),
    "request_model": (STR, (c.GEN_AI_REQUEST_MODEL,)),
    "response_model": (STR, (c.GEN_AI_RESPONSE_MODEL, c.OPENINFERENCE_MODEL_NAME)),
    "input_tokens": (COUNT, (c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_PROMPT_TOKENS_DEPRECATED,
                             c.OPENINFERENCE_TOKENS_PROMPT, c.OPENLLMETRY_USAGE_PROMPT_TOKENS)),
    "output_tokens": (COUNT, (c.GEN_AI_USAGE_OUTPUT_TOKENS, c.GEN_AI_USAGE_COMPLETION_TOKENS_DEPRECATED,
                              c.OPENINFERENCE_TOKENS_COMPLETION, c.OPENLLMETRY_USAGE_COMPLETION_TOKENS)),
    "cache_read_tokens": (COUNT, (c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, c.OPENLLMETRY_USAGE_CACHE_READ,
                                  c.OPENINFERENCE_TOKENS_CACHE_READ)),
    "cache_creation_tokens": (COUNT, (c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, c.OPENLLMETRY_USAGE_CACHE_CREATION,
                                      c.OPENINFERENCE_TOKENS_CACHE_WRITE)),
    "reasoning_tokens": (COUNT, (c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, c.OPENLLMETRY_USAGE_REASONING,
                                 c.OPENINFERENCE_TOKENS_REASONING)),
    "cost_usd": (NONNEG_FLOAT, (c.COST_USD,)),
    "ttft_s": (NONNEG_FLOAT, (c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,)),
    "retries": (COUNT, (c.RETRIES,)),
    "tool_calls": (COUNT, (c.TOOL_CALLS,)),
    "agent_step": (COUNT, (c.AGENT_STEP,)),
    "tool_name": (STR, (c.GEN_AI_TOOL_NAME, c.OPENINFERENCE_TOOL_NAME)),
    "outcome_success": (BOOL, (c.OUTCOME_SUCCESS,)),
    "quality_score": (FLOAT, (c.QUALITY_SCORE,)),
    "human_intervention": (BOOL, (c.HUMAN_INTERVENTION,)),
    "error_type": (STR, (c.ERROR_TYPE,)),
}
# Events whose first occurrence marks the first streamed chunk, for spans without a TTFT attribute.
FIRST_CHUNK_EVENTS = frozenset({c.OPENINFERENCE_FIRST_TOKEN_EVENT, c.OPENLLMETRY_CHUNK_EVENT})


@dataclass(frozen=True)
class _Source:
    column: str
    kind: str
    rank: int
    values: dict | None  # a vocabulary map for derived sources
    maximum: int  # the largest count the column can hold


_INT64_MAX = 2**63 - 1
# Counts too large for their column are invalid there (NULL, kept in attributes), like negative ones.
_COUNT_MAXIMUM = {"INTEGER": 2**31 - 1, "BIGINT": _INT64_MAX}
_SQL_TYPES = {column.name: column.sql_type.split()[0] for column in SPAN_COLUMNS}
_KEY_TO_SOURCE: dict[str, _Source] = {}
for _column, (_kind, _sources) in PROMOTED.items():
    for _rank, _source in enumerate(_sources):
        _key, _values = (_source, None) if isinstance(_source, str) else _source
        _KEY_TO_SOURCE[_key] = _Source(_column, _kind, _rank, _values, _COUNT_MAXIMUM.get(_SQL_TYPES[_column], 0))
# Columns that may also come from the resource when the span does not carry them.
_FROM_RESOURCE = ("target_id", "role", "assessment_id", "run_id")
_ROLE_VALUES = frozenset(c.ROLES)


def any_value(v, kind: str | None = None):
    """An OTLP AnyValue as a JSON-ready Python value (bytes as base64, non-finite floats as text)."""
    if kind is None:
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


def _typed(source: _Source, v, which: str | None):
    """The attribute's value if it is a valid value of the source's column, else None."""
    kind = source.kind
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
        if number < 0 or number != int(number) or number > source.maximum:
            return None
        return int(number)
    if kind == NONNEG_FLOAT and number < 0:
        return None
    return float(number)


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
_PROMOTED_COLUMNS = tuple(PROMOTED)
_PROMOTED_SLOTS = {column: slot for slot, column in enumerate(_PROMOTED_COLUMNS)}
# A row as `normalize` builds it: these columns in this order. The time columns derived from
# start/end are computed by Arrow in `SpanBatch.to_arrow`.
_ROW_LAYOUT = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "start_unix_nano", "end_unix_nano",
    "status_code", "status_message", "service_name", "scope_name", "attributes", "resource", "events", "links",
) + _PROMOTED_COLUMNS
_DERIVED_COLUMNS = ("start_time", "end_time", "duration_s")
if sorted(_ROW_LAYOUT + _DERIVED_COLUMNS) != sorted(_ROW_COLUMNS):
    raise RuntimeError("_ROW_LAYOUT does not cover the spans table's columns; update it with analytics._schema")


@dataclass
class SpanBatch:
    """Normalized rows ready for the store, and the spans refused with their reasons."""

    rows: list[tuple] = field(default_factory=list)
    """One tuple per span, in `_ROW_LAYOUT` order (when ``arrays`` is None)."""
    refused: list[str] = field(default_factory=list)
    arrays: list[pa.Array] | None = None
    """The rows as one Arrow array per column, in `_ROW_LAYOUT` order (the native scanner's output)."""

    @property
    def size(self) -> int:
        return len(self.arrays[0]) if self.arrays is not None else len(self.rows)

    def to_arrow(self) -> pa.Table:
        """The rows as an Arrow table in the `spans` row schema (every column but received_at)."""
        if self.arrays is not None:
            arrays = dict(zip(_ROW_LAYOUT, self.arrays))
        else:
            values = zip(*self.rows) if self.rows else ((),) * len(_ROW_LAYOUT)
            arrays = {name: pa.array(column, type=_ARROW_TYPES[name]) for name, column in zip(_ROW_LAYOUT, values)}
        start, end = arrays["start_unix_nano"], arrays["end_unix_nano"]
        # Times are checked to lie in 1..2**63-1 ns, so integer division is floor division.
        arrays["start_time"] = pc.divide(start, 1000).cast(_TS)
        arrays["end_time"] = pc.divide(end, 1000).cast(_TS)
        arrays["duration_s"] = pc.divide(pc.subtract(end, start).cast(pa.float64(), safe=False), 1e9)
        return pa.table([arrays[name] for name in _ROW_COLUMNS], names=list(_ROW_COLUMNS))


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


class _Attribute(NamedTuple):
    """What normalizing needs of one attribute, decoded once per distinct serialized KeyValue."""

    key: str
    json: str
    """``"key":value`` as it appears in the JSON object of attributes."""
    column: str | None
    """The typed column it promotes to (None: it does not, or its value is not valid there)."""
    rank: int
    value: object
    """The typed column value (when ``column`` is set)."""
    kept: bool
    """Whether it stays in ``attributes`` even when promoted (a derived source, not invertible)."""
    slot: int
    """``column``'s index in `_PROMOTED_COLUMNS` (-1 when ``column`` is None), for the native scanner."""


def _attribute(raw: bytes) -> _Attribute:
    kv = KeyValue.FromString(raw)
    key, v = kv.key, kv.value
    which = v.WhichOneof("value")
    text = orjson.dumps({key: any_value(v, which)})[1:-1].decode()
    column, rank, value, kept = None, 0, None, True
    source = _KEY_TO_SOURCE.get(key)
    if source is not None:
        value = _typed(source, v, which)
        if source.values is not None:
            value = source.values.get(value)
        elif source.column == "role" and value not in _ROLE_VALUES:
            value = None
        if value is not None:
            column, rank, kept = source.column, source.rank, source.values is not None
    return _Attribute(key, text, column, rank, value, kept, -1 if column is None else _PROMOTED_SLOTS[column])


class _BoundedCache(dict):
    """key -> make(key), remembering at most ``entries`` results of keys of ``size`` up to ``max_bytes``
    (longer ones are mostly unique content, such as messages); dropped whole when full. Shared by the
    decode threads: single dict operations need no lock, and a lost race only computes twice."""

    def __init__(self, make, entries: int, max_bytes: int, size=len):
        super().__init__()
        self._make, self._entries, self._max_bytes, self._size = make, entries, max_bytes, size

    def __missing__(self, key):
        value = self._make(key)
        if self._size(key) <= self._max_bytes:
            if len(self) >= self._entries:
                self.clear()
            self[key] = value
        return value


# Serialized KeyValue -> _Attribute: ordinary attributes repeat (the same model, finish reason,
# server address ...), so most are decoded once per process rather than once per span.
_attributes = _BoundedCache(_attribute, entries=8192, max_bytes=256)


def _promote(serialized_attributes, values: dict, held: dict) -> dict[str, str]:
    """Fill ``values`` (column -> typed value) from the mapped keys, keeping in ``held`` (column ->
    (rank, key, JSON text)) where each came from; return, by key, the JSON texts of the attributes not
    held in a typed column (unmapped, invalid, outranked or derived). A key given twice keeps its
    first position and its last value, as in a JSON object built in order."""
    rest: dict[str, str] = {}
    for key, text, column, rank, value, kept, _slot in map(_attributes.__getitem__, serialized_attributes):
        if column is not None:
            current = held.get(column)
            if current is None or rank < current[0]:
                held[column] = (rank, key, text)
                values[column] = value
                if current is not None and current[1] not in rest:
                    rest[current[1]] = current[2]
                if not kept:
                    continue
        rest[key] = text
    return rest


def _json_object(serialized_attributes) -> str:
    """The attributes as one JSON object (no promotion), e.g. of an event or a link."""
    texts: dict[str, str] = {}
    for attribute in map(_attributes.__getitem__, serialized_attributes):
        texts[attribute[0]] = attribute[1]
    return "{" + ",".join(texts.values()) + "}"


def _event_parts(shape: tuple) -> tuple[str, str, bool]:
    """(text before the time, text after it, marks the first chunk) of an event's JSON object."""
    name, *serialized_attributes = shape
    return (f'{{"name":{orjson.dumps(name).decode()},"time_unix_nano":',
            f',"attributes":{_json_object(serialized_attributes)}}}', name in FIRST_CHUNK_EVENTS)


# (event name, serialized attributes...) -> _event_parts: events of one kind differ only in time.
_event_shapes = _BoundedCache(_event_parts, entries=1024, max_bytes=1024,
                              size=lambda shape: len(shape[0]) + sum(map(len, shape[1:])))


def _events(span, want_first_chunk: bool) -> tuple[str | None, float | None]:
    """The span's events as JSON, and the seconds to the first streamed chunk if asked for and marked."""
    events = span.events
    if not events:
        return None, None
    texts, first_chunk_s = [], None
    for event in events:
        before, after, first_chunk = _event_shapes[(event.name, *event.attributes)]
        t = event.time_unix_nano
        texts.append(f"{before}{t}{after}")
        if want_first_chunk and first_chunk and t >= span.start_time_unix_nano:
            first_chunk_s = (t - span.start_time_unix_nano) / 1e9
            want_first_chunk = False
    return "[" + ",".join(texts) + "]", first_chunk_s


def _links_json(links) -> str | None:
    if not links:
        return None
    return "[" + ",".join(
        f'{{"trace_id":"{link.trace_id.hex()}","span_id":"{link.span_id.hex()}",'
        f'"attributes":{_json_object(link.attributes)}}}'
        for link in links
    ) + "]"


def _dumps(obj) -> str | None:
    return orjson.dumps(obj).decode() if obj else None


_PRICED_BY_COLLECTOR = orjson.dumps({c.COST_PRICED_BY: "collector"})[1:-1].decode()


class _ResourceContext(NamedTuple):
    """What the spans of one ResourceSpans take from their resource."""

    service_name: str | None
    json: str | None
    defaults: list[tuple[str, object]]
    """(column, value) for the `_FROM_RESOURCE` columns the resource sets, for spans that do not."""


def _resource_context(lean_rs) -> _ResourceContext:
    resource = {kv.key: any_value(kv.value) for kv in _otlp.full_resource(lean_rs.resource).attributes}
    resource_values: dict = {}
    _promote(lean_rs.resource.attributes, resource_values, {})
    service_name = resource.get(c.SERVICE_NAME) if isinstance(resource.get(c.SERVICE_NAME), str) else None
    return _ResourceContext(service_name, _dumps(resource),
                            [(column, resource_values[column]) for column in _FROM_RESOURCE if column in resource_values])


def walk_normalize(lean, refusals, options: NormalizeOptions, checks) -> SpanBatch:
    batch = SpanBatch()
    add_row = batch.rows.append
    for ri, lean_rs in enumerate(lean.resource_spans):
        resource = _resource_context(lean_rs)
        for si, lean_ss in enumerate(lean_rs.scope_spans):
            scope_name = _otlp.full_scope(lean_ss.scope).name or None
            for pi, span in enumerate(lean_ss.spans):
                row = _span_row(span, (ri, si, pi), refusals, checks, resource, scope_name, options)
                if isinstance(row, str):
                    batch.refused.append(row)
                else:
                    add_row(row)
    return batch


_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)


def _span_row(span, position, refusals, checks, resource: _ResourceContext, scope_name, options: NormalizeOptions):
    """The row of one lean span in `_ROW_LAYOUT` order, or the reason it is refused (a str)."""
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    problem = refusals.get(position) if refusals else None
    if problem is None and checks is not None:
        problem = checks.problem(position, span)
    if problem is None and (
        len(trace_id) != 16 or trace_id == _ZERO_TRACE or len(span_id) != 8 or span_id == _ZERO_SPAN
        or (parent and len(parent) != 8) or not start or end < start or end > _INT64_MAX
    ):
        problem = _span_problem(span)
    if problem:
        _otlp.full_span(span)  # a refused span's parts are read nowhere else: check them
        return f"span {span_id.hex() or '?'} in trace {trace_id.hex() or '?'}: {problem}"
    values: dict = {}
    rest = _promote(span.attributes, values, {})
    for column, value in resource.defaults:
        if column not in values:
            values[column] = value
    if "role" not in values and c.ROLE not in rest:
        # No role given: the target's own call. A role given but invalid stays NULL
        # (kept in attributes), so a mistyped orchestration span is never counted.
        values["role"] = c.ROLE_APPLICATION
    events_json, first_chunk_s = _events(span, "ttft_s" not in values)
    if first_chunk_s is not None:
        values["ttft_s"] = first_chunk_s
    if "target_id" not in values and options.target_fallback:
        values["target_id"] = fallback_target(options.target_fallback, values, resource.service_name, scope_name)
    if "cost_usd" not in values and options.price is not None and c.COST_USD not in rest:
        cost = price_span(options.price, values, end)
        if cost is not None:
            values["cost_usd"] = cost
            rest[c.COST_PRICED_BY] = _PRICED_BY_COLLECTOR
    status = span.status
    return (
        trace_id.hex(), span_id.hex(), parent.hex() if parent else None, span.name, span.kind,
        start, end, status.code, status.message or None, resource.service_name, scope_name,
        "{" + ",".join(rest.values()) + "}" if rest else None, resource.json,
        events_json, _links_json(span.links),
        *map(values.get, _PROMOTED_COLUMNS),
    )
