"""The native span scanner (`collector/process/_spanscan.c`) against the Python walk it stands in for.

The receive path normalizes a protobuf body with the scanner; the Python walk (`_walk.walk_normalize`)
is the reference. Every case here normalizes one body both ways and requires the same Arrow table,
the same refusals, or a BadRequest from both: random requests, wire-level shapes (fields repeated, merged,
unknown, of the wrong wire type, groups) and byte-level mutations of valid bodies.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from meritlens.collector.process import _normalize, _scan, _walk
from meritlens.collector.process._native import native as spanscan
from meritlens.collector.process import _otlp
from meritlens.collector.process._options import NormalizeOptions
from meritlens.collector.process._walk import FIRST_CHUNK_EVENTS, PROMOTED
from meritlens.instrumentation import conventions as c
from tests.otlp_builders import make_request, make_span, wire_field, wire_tag, wire_varint


def fake_price(provider, model, input_tokens, output_tokens, cache_read, cache_creation, reasoning, *, at):
    """A price function with a gap (model "free" has no price) and a dependence on every argument."""
    assert isinstance(at, dt.datetime)
    if model == "free":
        return None
    return (input_tokens + 2 * output_tokens + cache_read + cache_creation + reasoning) * 1e-6


NOT_PROTOBUF = "body is not a valid OTLP protobuf ExportTraceServiceRequest: "
FILLING = NormalizeOptions(target_fallback="{service.name}/{model}@{scope}", price=fake_price)
NO_FILLING = NormalizeOptions(target_fallback=None, price=None)
WIDE = _otlp.SpanLimits(max_attributes=1024, max_attribute_bytes=1024 * 1024)
TIGHT = _otlp.SpanLimits(max_attributes=6, max_attribute_bytes=40)


def outcome(body: bytes, limits: _otlp.SpanLimits, options: NormalizeOptions, *, scanned: bool):
    """(refusals, Arrow table or None) of normalizing ``body``, or ("BadRequest", message)."""
    try:
        lean = _otlp.LeanRequest.FromString(body)
        checks = _otlp.SpanChecks(lean, limits, len(body))
        batch = _normalize.normalize(lean, None, options, checks=checks, body=body if scanned else None)
    except _otlp.BadRequest as exc:
        return "BadRequest", str(exc)
    return batch.refused, (batch.to_arrow() if batch.size else None)


def assert_same(body: bytes, limits: _otlp.SpanLimits = WIDE, options: NormalizeOptions = FILLING):
    walked = outcome(body, limits, options, scanned=False)
    scanned = outcome(body, limits, options, scanned=True)
    assert scanned[0] == walked[0]
    if walked[0] == "BadRequest":
        # Refused whole either way. A body invalid in several places may be reported by another of
        # them: the scanner reads ordinary spans before the ones it leaves to the Python walk.
        assert scanned[1].startswith(NOT_PROTOBUF) and walked[1].startswith(NOT_PROTOBUF)
    elif walked[1] is None:
        assert scanned[1] == walked[1]
    else:
        assert scanned[1] is not None and scanned[1].to_pylist() == walked[1].to_pylist()
        assert scanned[1].schema == walked[1].schema
    return walked


def test_the_native_scanner_is_built_and_takes_ordinary_spans():
    """`pip install` builds the extension; an ordinary request leaves no span to the Python walk."""
    assert spanscan is not None, "collector/process/_spanscan.c was not built (pip install -e .)"
    spans = [make_span({c.TARGET_ID: "t", c.GEN_AI_REQUEST_MODEL: "m", c.GEN_AI_USAGE_INPUT_TOKENS: 3}) for _ in range(5)]
    body = make_request(spans).SerializeToString()
    lean = _otlp.LeanRequest.FromString(body)
    checks = _otlp.SpanChecks(lean, WIDE, len(body))
    resources = [(None, None, (), False)]
    scanned = spanscan.scan(body, _scan._scan_plan(FILLING, checks), resources, [[None]])
    columns, rows, python_spans, finish = scanned
    assert python_spans == [] and len(columns) == len(_walk._ROW_LAYOUT) and rows == 5
    trace_ids = _scan._array("trace_id", rows, columns[_scan._COLUMN["trace_id"]])
    assert trace_ids.to_pylist() == [s.trace_id.hex() for s in spans]
    assert [row for row, *_ in finish] == list(range(5))  # no cost: each is priced afterwards
    refused, table = assert_same(body)
    assert refused == [] and table.num_rows == 5


def test_a_broken_plan_is_a_clear_error_not_a_crash():
    with pytest.raises(TypeError, match="16-tuple"):
        spanscan.scan(b"", (), [], [])
    plan = list(_scan._scan_plan(FILLING, None))
    plan[3] = 999  # the role slot
    with pytest.raises(ValueError, match="not a valid scan plan"):
        spanscan.scan(b"", tuple(plan), [], [])


# --- random requests ------------------------------------------------------------------------------
_KEYS = sorted({s if isinstance(s, str) else s[0] for _, sources in PROMOTED.values() for s in sources}
               | {c.ROLE, c.COST_USD, c.COST_PRICED_BY, "http.status_code", "a"})
_TEXTS = ["", "application", "orchestration", "LLM", "TOOL", "chat", "embedding", "openai", "gpt-4o-mini", "free",
          "ünï ✓", 'q"\\\n\x01\x1f', "x" * 50]


def _any_value(depth: int = 0):
    scalars = st.one_of(
        st.builds(AnyValue, string_value=st.sampled_from(_TEXTS)),
        st.builds(AnyValue, int_value=st.sampled_from([0, 1, 7, -3, 2**31, 2**63 - 1, -(2**63)])),
        st.builds(AnyValue, double_value=st.sampled_from([0.0, 2.5, -1.5, 1e300, float("nan"), float("inf"), 3.0])),
        st.builds(AnyValue, bool_value=st.booleans()),
        st.builds(AnyValue, bytes_value=st.binary(max_size=4)),
        st.just(AnyValue()),
    )
    if depth:
        return scalars
    nested = st.lists(_any_value(1), max_size=2).map(lambda vs: _array(vs))
    return st.one_of(scalars, nested)


def _array(values) -> AnyValue:
    v = AnyValue()
    v.array_value.values.extend(values)
    return v


_ATTRIBUTES = st.lists(st.builds(KeyValue, key=st.sampled_from(_KEYS), value=_any_value()), max_size=9)
_EVENT_NAMES = sorted(FIRST_CHUNK_EVENTS) + ["gen_ai.choice", 'na"me\n']
_START = 1_780_000_000_000_000_000


@st.composite
def spans(draw) -> Span:
    start = draw(st.sampled_from([_START, _START + 17, 0]))
    span = Span(
        trace_id=draw(st.sampled_from([bytes(range(1, 17)), bytes(range(2, 18)), bytes(16), b"\x01" * 15])),
        span_id=draw(st.sampled_from([bytes(range(1, 9)), bytes(range(3, 11)), bytes(8), b"\x02" * 7])),
        parent_span_id=draw(st.sampled_from([b"", bytes(range(5, 13)), b"\x03" * 3])),
        name=draw(st.sampled_from(_TEXTS)),
        kind=draw(st.sampled_from([0, 1, 3, 5, 6])),
        start_time_unix_nano=start,
        end_time_unix_nano=draw(st.sampled_from([start, start + 250_000_000, max(0, start - 1), 2**63 + 1])),
    )
    span.status.code = draw(st.sampled_from([0, 1, 2, 3]))
    span.status.message = draw(st.sampled_from(["", "boom"]))
    span.attributes.extend(draw(_ATTRIBUTES))
    if draw(st.booleans()):
        model = draw(st.sampled_from(["gpt-4o-mini", "free"]))
        span.attributes.extend([
            KeyValue(key=c.GEN_AI_REQUEST_MODEL, value=AnyValue(string_value=model)),
            KeyValue(key=c.GEN_AI_USAGE_INPUT_TOKENS, value=AnyValue(int_value=draw(st.integers(0, 500)))),
            KeyValue(key=c.GEN_AI_USAGE_OUTPUT_TOKENS, value=AnyValue(int_value=draw(st.integers(0, 500)))),
        ])
    for _ in range(draw(st.integers(0, 3))):
        event = span.events.add(name=draw(st.sampled_from(_EVENT_NAMES)),
                                time_unix_nano=max(0, start + draw(st.sampled_from([-5, 0, 10**8]))))
        event.attributes.extend(draw(st.lists(st.builds(KeyValue, key=st.sampled_from(["a", "b"]), value=_any_value(1)),
                                              max_size=7)))
    if draw(st.integers(0, 5)) == 0:
        span.links.add(trace_id=bytes(range(7, 23)), span_id=bytes(range(7, 15))).attributes.add(key="why")
    return span


@st.composite
def bodies(draw) -> bytes:
    resource = draw(st.dictionaries(st.sampled_from([c.SERVICE_NAME, c.TARGET_ID, c.ROLE, c.RUN_ID, "host"]),
                                    st.sampled_from(["svc", "orchestration", "x" * 60]), max_size=3))
    request = make_request(draw(st.lists(spans(), min_size=1, max_size=6)), resource=resource)
    if draw(st.booleans()):  # a second resource, with spans of its own
        request.resource_spans.extend(make_request(draw(st.lists(spans(), max_size=3))).resource_spans)
    return request.SerializeToString()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies(), tight=st.booleans(), filling=st.booleans())
def test_random_requests_give_the_same_rows_and_refusals(body, tight, filling):
    assert_same(body, TIGHT if tight else WIDE, FILLING if filling else NO_FILLING)


# --- wire-level shapes ----------------------------------------------------------------------------
def _body_with_span_extra(extra: bytes, attributes: dict | None = None) -> bytes:
    """A one-span request whose serialized span has ``extra`` appended (later fields win or merge)."""
    span = make_span(attributes or {c.TARGET_ID: "t", c.GEN_AI_REQUEST_MODEL: "m"})
    span_bytes = span.SerializeToString() + extra
    scope_spans = wire_field(2, span_bytes)
    resource_spans = wire_field(2, scope_spans)
    return wire_field(1, resource_spans)


WIRE_SHAPES = {
    "status split over two occurrences": wire_field(15, wire_tag(3, 0) + wire_varint(2)) + wire_field(15, wire_field(2, b"late")),
    "name given twice": wire_field(5, b"second name"),
    "unknown varint, fixed32, fixed64 and bytes fields": (
        wire_tag(40, 0) + wire_varint(7) + wire_tag(41, 5) + b"\x01\x02\x03\x04" + wire_tag(42, 1) + b"\x00" * 8 + wire_field(43, b"xyz")),
    "kind as a fixed64 (wrong wire type: an unknown field)": wire_tag(6, 1) + b"\x03" + b"\x00" * 7,
    "start time as a varint (wrong wire type)": wire_tag(7, 0) + wire_varint(5),
    "kind as an overlong varint": wire_tag(6, 0) + b"\x83\x80\x80\x00",
    "negative kind": wire_tag(6, 0) + wire_varint(2**64 - 1),
    "kind over 32 bits": wire_tag(6, 0) + wire_varint(2**32 + 2),
    "a group": wire_tag(44, 3) + wire_tag(1, 0) + wire_varint(1) + wire_tag(44, 4),
    "an event with extra fields and its name twice": wire_field(11, wire_tag(1, 1) + (_START + 9).to_bytes(8, "little")
                                                               + wire_field(2, b"a") + wire_tag(9, 0) + wire_varint(1)
                                                               + wire_field(2, FIRST_CHUNK_EVENTS.__iter__().__next__().encode())),
    "a span id given twice": wire_field(2, bytes(range(40, 48))),
    "an empty trace id given last": wire_field(1, b""),
    "end time over int64": wire_tag(8, 1) + (2**63).to_bytes(8, "little"),
}


@pytest.mark.parametrize("shape", sorted(WIRE_SHAPES))
def test_wire_shapes_read_as_protobuf_reads_them(shape):
    body = _body_with_span_extra(WIRE_SHAPES[shape])
    _otlp.LeanRequest.FromString(body)  # the shape is valid protobuf
    for limits in (WIDE, TIGHT):
        assert_same(body, limits)


def test_a_price_already_named_in_the_attributes_is_left_to_the_python_walk():
    body = _body_with_span_extra(b"", {c.GEN_AI_REQUEST_MODEL: "m", c.GEN_AI_USAGE_INPUT_TOKENS: 10,
                                       c.GEN_AI_USAGE_OUTPUT_TOKENS: 5, c.COST_PRICED_BY: "someone"})
    refused, table = assert_same(body)
    assert table.column("cost_usd").to_pylist() == [pytest.approx(20e-6)]
    assert '"meritlens.cost.priced_by":"collector"' in table.column("attributes")[0].as_py()


# --- mutated bodies -------------------------------------------------------------------------------
def _seed_bodies() -> list[bytes]:
    rng = random.Random(3)
    out = []
    for n in (1, 3):
        spans_ = [make_span({c.TARGET_ID: "t", c.GEN_AI_REQUEST_MODEL: rng.choice(["m", "free"]),
                             c.GEN_AI_USAGE_INPUT_TOKENS: rng.randint(1, 9), c.ROLE: "application", "a": 1.5})
                  for _ in range(n)]
        for span in spans_:
            span.events.add(name=sorted(FIRST_CHUNK_EVENTS)[0], time_unix_nano=span.start_time_unix_nano + 5)
            span.status.code, span.status.message = 2, "boom"
        out.append(make_request(spans_, resource={c.SERVICE_NAME: "svc"}).SerializeToString())
    return out


SEEDS = _seed_bodies()


@settings(max_examples=400, deadline=None)
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_byte_mutations_that_protobuf_accepts_read_the_same(seed, data):
    body = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body) - 1))
        how = data.draw(st.sampled_from(["set", "flip", "delete", "insert"]))
        if how == "set":
            body[at] = data.draw(st.integers(0, 255))
        elif how == "flip":
            body[at] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "delete":
            del body[at]
        else:
            body.insert(at, data.draw(st.integers(0, 255)))
    body = bytes(body)
    try:
        _otlp.LeanRequest.FromString(body)
    except DecodeError:
        return  # refused before normalizing, whichever way it would be walked
    assert_same(body, WIDE)
    assert_same(body, TIGHT)


def _scan_unchecked(body: bytes):
    """The scanner on ``body``, whether or not protobuf parses it."""
    plan = _scan._scan_plan(FILLING, _otlp.SpanChecks(_otlp.LeanRequest(), TIGHT, 0))
    resources = [("svc", "{}", ((0, "t"),), False)] * 4
    return spanscan.scan(body, plan, resources, [[None] * 4] * 4)


@settings(max_examples=300, deadline=None)
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_the_scanner_survives_bodies_protobuf_refuses(seed, data):
    """The receive path calls the scanner only on bodies protobuf parsed, but it must not depend on
    that: on any bytes it returns columns of equal length, None (left to the Python walk), or raises."""
    if data.draw(st.booleans()):
        body = data.draw(st.binary(max_size=300))
    else:
        body = bytearray(seed)
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(body) - 1))
            body[at] = data.draw(st.integers(0, 255))
        body = bytes(body[:data.draw(st.integers(0, len(body)))])
    try:
        scanned = _scan_unchecked(body)
    except (DecodeError, UnicodeDecodeError):
        return  # an attribute or a text that is not valid protobuf
    if scanned is not None:
        columns, rows, python_spans, finish = scanned
        arrays = [_scan._array(name, rows, buffers) for name, buffers in zip(_walk._ROW_LAYOUT, columns)]
        for array in arrays:
            array.validate(full=True)
        assert all(0 <= row < rows for row, *_ in python_spans + finish)


@pytest.mark.parametrize("where, replace", [
    (b"\x12\x18First Token Stream Event", b"\x12\x18\x80irst Token Stream Event"),  # event name: not UTF-8
    (b"\x12\x18First Token Stream Event", b"\x00\x18First Token Stream Event"),  # event field number 0
    (b"*\x06chat m", b"*\x06ch\xc0\xaf m"),  # span name: an overlong '/'
    (b"*\x06chat m", b"*\x06cha\xed\xa0\x80"),  # span name: a surrogate
])
def test_the_scanner_leaves_spans_it_cannot_read_to_the_python_walk(where, replace):
    """Found by the test above: an event that is not valid protobuf made the scanner fail without
    an exception (SystemError), and a name that is not UTF-8 was copied into the columns. The
    receivers' parse refuses both bodies first; the scanner leaves such a span to the walk."""
    seed = next(s for s in SEEDS if s.count(where) == 1)
    body = seed.replace(where, replace)
    assert len(body) == len(seed)
    with pytest.raises(DecodeError):
        _otlp.LeanRequest.FromString(body)
    columns, rows, python_spans, finish = _scan_unchecked(body)
    assert [row for row, *_ in python_spans] == [0] and rows == 1 and finish == []
    for name, buffers in zip(_walk._ROW_LAYOUT, columns):
        _scan._array(name, rows, buffers).validate(full=True)
    columns, rows, python_spans, finish = _scan_unchecked(seed)
    assert python_spans == [] and rows == 1  # the same span, unharmed, is the scanner's
