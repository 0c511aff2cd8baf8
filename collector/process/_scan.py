"""The native scanner's side of normalization: its plan, its Arrow buffers made arrays, and the
rows it leaves to finish (a target or a cost to fill) or to the Python walk (`_walk._span_row`,
the reference the scanner is tested against)."""

from __future__ import annotations

import pyarrow as pa

from meritlens.collector.process import _otlp
from meritlens.collector.process._native import native as _spanscan
from meritlens.collector.process._options import NormalizeOptions, fallback_target, price_span
from meritlens.collector.process._walk import (
    _ARROW_TYPES,
    _INT64_MAX,
    _PRICED_BY_COLLECTOR,
    _PROMOTED_COLUMNS,
    _PROMOTED_SLOTS,
    _ROW_LAYOUT,
    FIRST_CHUNK_EVENTS,
    SpanBatch,
    _attributes,
    _resource_context,
    _span_row,
    walk_normalize,
)
from meritlens.instrumentation import conventions as c

_COLUMN = {name: i for i, name in enumerate(_ROW_LAYOUT)}
_FIRST_CHUNK_NAMES = tuple(name.encode() for name in sorted(FIRST_CHUNK_EVENTS))
# The scanner's column kinds (K_* in _spanscan.c), by Arrow type; it builds each column's buffers.
_KINDS = {pa.string(): 0, pa.int8(): 1, pa.int32(): 2, pa.int64(): 3, pa.float64(): 4, pa.bool_(): 5}
_PROMOTED_KINDS = tuple(_KINDS[_ARROW_TYPES[column]] for column in _PROMOTED_COLUMNS)
_FINISH_INPUTS = ("request_model", "response_model", "provider", "input_tokens", "output_tokens",
                  "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens")
"""The promoted columns `fallback_target` and `price_span` read."""


def _scan_plan(options: NormalizeOptions, checks: _otlp.SpanChecks | None) -> tuple:
    """What `_spanscan.scan` needs besides the body: see its C source for the order."""
    return (
        _attributes, _FIRST_CHUNK_NAMES, len(_PROMOTED_COLUMNS),
        _PROMOTED_SLOTS["role"], _PROMOTED_SLOTS["ttft_s"], _PROMOTED_SLOTS["target_id"], _PROMOTED_SLOTS["cost_usd"],
        c.ROLE, c.COST_USD, c.COST_PRICED_BY, c.ROLE_APPLICATION,
        checks.limits.max_attributes if checks is not None else _INT64_MAX,
        -1 if checks is None or checks.texts_fit else checks.limits.max_attribute_bytes,
        options.price is not None, bool(options.target_fallback), _PROMOTED_KINDS,
    )


def _array(name: str, rows: int, buffers: tuple) -> pa.Array:
    """One column the scanner built: (validity or None, offsets or None, data, null count)."""
    validity, offsets, data, nulls = buffers
    parts = [None if validity is None else pa.py_buffer(validity)]
    if offsets is not None:
        parts.append(pa.py_buffer(offsets))
    parts.append(pa.py_buffer(data))
    return pa.Array.from_buffers(_ARROW_TYPES[name], rows, parts, null_count=nulls)


def scan_normalize(lean, body: bytes, options: NormalizeOptions, checks) -> SpanBatch:
    """`walk_normalize` with the per-span work done by the native scanner; the spans it leaves (see its C
    source) go through `_span_row`, and the rows that need a fallback target or a price are finished here."""
    contexts = [_resource_context(lean_rs) for lean_rs in lean.resource_spans]
    resources = [
        (ctx.service_name, ctx.json, tuple((_PROMOTED_SLOTS[column], value) for column, value in ctx.defaults),
         checks is not None and checks.resource_problem(ri) is not None)
        for ri, ctx in enumerate(contexts)
    ]
    scopes = [[_otlp.full_scope(ss.scope).name or None for ss in lean_rs.scope_spans] for lean_rs in lean.resource_spans]
    scanned = _spanscan.scan(body, _scan_plan(options, checks), resources, scopes)
    if scanned is None:  # a body shape the scanner leaves to the Python walk (protobuf groups)
        return walk_normalize(lean, None, options, checks)
    columns, rows, python_spans, finish = scanned
    arrays = [_array(name, rows, buffers) for name, buffers in zip(_ROW_LAYOUT, columns)]
    batch = SpanBatch(arrays=arrays)
    if finish:
        _finish_rows(arrays, finish, options)
    if python_spans:
        _python_rows(batch, lean, python_spans, checks, contexts, scopes, options)
    return batch


def _finish_rows(arrays: list[pa.Array], finish: list[tuple[int, bool, bool]], options: NormalizeOptions) -> None:
    """The fallback target and the collector's price of scanned rows, as `_span_row` sets them."""
    at = pa.array([row for row, _, _ in finish], type=pa.int64())
    picked = {name: arrays[_COLUMN[name]].take(at).to_pylist()
              for name in (*_FINISH_INPUTS, "service_name", "scope_name", "end_unix_nano")}
    patched = {name: arrays[_COLUMN[name]].to_pylist() for name in ("target_id", "cost_usd", "attributes")}
    for k, (row, needs_target, needs_price) in enumerate(finish):
        values = {name: picked[name][k] for name in _FINISH_INPUTS if picked[name][k] is not None}
        if needs_target:
            patched["target_id"][row] = fallback_target(
                options.target_fallback, values, picked["service_name"][k], picked["scope_name"][k])
        if needs_price:
            cost = price_span(options.price, values, picked["end_unix_nano"][k])
            if cost is not None:
                patched["cost_usd"][row] = cost
                attributes = patched["attributes"][row]  # the scanner left spans that already say it
                patched["attributes"][row] = ("{" + _PRICED_BY_COLLECTOR + "}" if attributes is None
                                              else attributes[:-1] + "," + _PRICED_BY_COLLECTOR + "}")
    for name, values in patched.items():
        arrays[_COLUMN[name]] = pa.array(values, type=_ARROW_TYPES[name])


def _python_rows(batch: SpanBatch, lean, python_spans, checks, contexts, scopes, options: NormalizeOptions) -> None:
    """Fill the placeholder rows of the spans the scanner left with `_span_row`; drop the refused ones."""
    columns = [array.to_pylist() for array in batch.arrays]
    refused_rows = set()
    for row, ri, si, pi in python_spans:
        span = lean.resource_spans[ri].scope_spans[si].spans[pi]
        result = _span_row(span, (ri, si, pi), None, checks, contexts[ri], scopes[ri][si], options)
        if isinstance(result, str):
            batch.refused.append(result)
            refused_rows.add(row)
        else:
            for column, value in zip(columns, result):
                column[row] = value
    if refused_rows:
        columns = [[value for i, value in enumerate(column) if i not in refused_rows] for column in columns]
    batch.arrays = [pa.array(column, type=_ARROW_TYPES[name]) for name, column in zip(_ROW_LAYOUT, columns)]
