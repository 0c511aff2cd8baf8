"""Turning decoded OTLP spans into rows of the `spans` table.

Promoted fields go to typed columns through one mapping table; everything else is kept
losslessly as JSON. A promoted value of the wrong type, or not finite, or negative where a
count is meant, stays out of its column (NULL) and is kept with the other attributes: it is
never stored as something else. Spans that cannot be stored at all (bad IDs, bad times) are
refused one by one, with the reason.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import orjson
import pyarrow as pa

from meritlens.analytics._schema import SPAN_COLUMN_NAMES
from meritlens.collector._settings import DEFAULT_TARGET_FALLBACK
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


_KEY_TO_SOURCE: dict[str, _Source] = {}
for _column, (_kind, _sources) in PROMOTED.items():
    for _rank, _source in enumerate(_sources):
        _key, _values = (_source, None) if isinstance(_source, str) else _source
        _KEY_TO_SOURCE[_key] = _Source(_column, _kind, _rank, _values)
# Columns that may also come from the resource when the span does not carry them.
_FROM_RESOURCE = ("target_id", "role", "assessment_id", "run_id")
_ROLE_VALUES = frozenset(c.ROLES)

_INT64_MAX = 2**63 - 1


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


def _typed(kind: str, v, which: str | None):
    """The attribute's value if it is a valid value of ``kind``, else None."""
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
    """Fill ``into`` (column -> (rank, value, key, AnyValue)) from the mapped keys; return the
    attributes that are not held in a typed column (unmapped, invalid, outranked or derived)."""
    rest = {}
    for kv in attributes:
        key = kv.key
        v = kv.value
        which = v.WhichOneof("value")
        source = _KEY_TO_SOURCE.get(key)
        if source is not None:
            value = _typed(source.kind, v, which)
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


PriceFunction = Callable[..., "float | None"]
"""price(provider, model, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens,
reasoning_tokens, *, at) -> USD or None when the model has no price (meritlens.instrumentation.price_call)."""

@dataclass(frozen=True)
class NormalizeOptions:
    """How the collector fills what a span did not say.

    target_fallback: a template for spans of LLM calls that carry no target ID, with the fields
    ``{service.name}``, ``{model}`` (request model, else response model), ``{provider}`` and
    ``{scope}``; None turns the fallback off. A span missing a field of the template gets no target.
    price: prices spans that carry tokens but no cost (None: never price in the collector).
    """

    target_fallback: str | None = DEFAULT_TARGET_FALLBACK
    price: PriceFunction | None = None


_TEMPLATE_FIELD = re.compile(r"\{([^{}]+)\}")


def _fallback_target(template: str, values: dict, service_name, scope_name) -> str | None:
    model = values.get("request_model") or values.get("response_model")
    if model is None and values.get("input_tokens") is None and values.get("output_tokens") is None:
        return None  # not an LLM call: task roots, HTTP and tool spans get no invented target
    fields = {"service.name": service_name, "model": model, "provider": values.get("provider"), "scope": scope_name}
    missing = False

    def field(match: re.Match) -> str:
        nonlocal missing
        value = fields.get(match.group(1))
        if value is None:
            missing = True
            return ""
        return value

    target = _TEMPLATE_FIELD.sub(field, template)
    return None if missing else target


def _first_chunk_seconds(span) -> float | None:
    for event in span.events:
        if event.name in FIRST_CHUNK_EVENTS and event.time_unix_nano >= span.start_time_unix_nano:
            return (event.time_unix_nano - span.start_time_unix_nano) / 1e9
    return None


def _price(price: PriceFunction, values: dict, end_unix_nano: int) -> float | None:
    """The span's cost from its model and tokens; None unless both token counts are known. Cache and
    reasoning counts a span does not report are priced as ordinary tokens (an upper bound)."""
    model = values.get("response_model") or values.get("request_model")
    if model is None or values.get("input_tokens") is None or values.get("output_tokens") is None:
        return None
    try:
        cost = price(
            values.get("provider"), model, values["input_tokens"], values["output_tokens"],
            values.get("cache_read_tokens") or 0, values.get("cache_creation_tokens") or 0,
            values.get("reasoning_tokens") or 0,
            at=_dt.datetime.fromtimestamp(end_unix_nano / 1e9, _dt.timezone.utc),
        )
    except Exception:  # noqa: BLE001 - a price lookup failure leaves the cost unknown
        return None
    return cost if cost is not None and math.isfinite(cost) and cost >= 0 else None


TARGET_FALLBACK_FIELDS = ("service.name", "model", "provider", "scope")


def check_target_fallback(template: str) -> str:
    """Return ``template`` if every ``{field}`` in it is known; raise ValueError naming the others."""
    unknown = [f for f in _TEMPLATE_FIELD.findall(template) if f not in TARGET_FALLBACK_FIELDS]
    if unknown:
        raise ValueError(
            f"target fallback {template!r} uses unknown field(s) {', '.join(unknown)};"
            f" known: {', '.join(TARGET_FALLBACK_FIELDS)}"
        )
    if not _TEMPLATE_FIELD.search(template):
        raise ValueError(f"target fallback {template!r} names no field; known: {', '.join(TARGET_FALLBACK_FIELDS)}")
    return template


_DEFAULT_OPTIONS = NormalizeOptions()


def normalize(request, refusals: dict[tuple[int, int, int], str] | None = None,
              options: NormalizeOptions = _DEFAULT_OPTIONS) -> SpanBatch:
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
                values = {column: hit[1] for column, hit in found.items()}
                if "role" not in values and c.ROLE not in rest:
                    # No role given: the target's own call. A role given but invalid stays NULL
                    # (kept in attributes), so a mistyped orchestration span is never counted.
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
