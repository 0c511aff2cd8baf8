"""Rows the receive path makes of OTLP spans (decode, limit checks, normalize, Arrow), without the server.

The normalizer reads spans through the lean view and remembers decoded attributes across spans and
requests; these tests pin the rows that must come out regardless of what it remembers.
"""

from __future__ import annotations

import base64
import json
import os

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from meritlens.collector.receive import _ingest
from meritlens.collector.process import _walk
from meritlens.collector.process import _otlp
from meritlens.collector.process._options import NormalizeOptions
from meritlens.instrumentation import conventions as c
from tests.otlp_builders import make_request, make_span, wire_field

LIMITS = _otlp.SpanLimits(max_attributes=1024, max_attribute_bytes=1024 * 1024)
NO_FILLING = NormalizeOptions(target_fallback=None, price=None)


def rows(request, limits=LIMITS, options=NO_FILLING, *, via_json: bool = False):
    """(refusals, rows as dicts) for ``request``, sent as protobuf bytes or as the decoded JSON form."""
    if via_json:
        doc = json_format.MessageToDict(request)  # bytes as base64; OTLP/JSON carries IDs as hex
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for field in ("traceId", "spanId", "parentSpanId"):
                        if field in span:
                            span[field] = base64.b64decode(span[field]).hex()
        decoded = _otlp.decode(json.dumps(doc).encode(), _otlp.JSON)
    else:
        decoded = _otlp.decode_lean(request.SerializeToString(), _otlp.PROTOBUF)  # what the receivers run
    batch, table = _ingest.prepare(decoded, limits, options)
    return batch.refused, ([] if table is None else table.to_pylist())


def kv(key: str, **value) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))


def test_a_count_too_large_for_its_integer_column_stays_out_of_it_and_is_kept():
    span = make_span({c.RETRIES: 2**31, c.TOOL_CALLS: 2**31 - 1, c.GEN_AI_USAGE_INPUT_TOKENS: 2**31})
    refused, [row] = rows(make_request([span]))
    assert refused == []
    assert row["retries"] is None  # INTEGER column: 2**31 does not fit
    assert row["tool_calls"] == 2**31 - 1
    assert row["input_tokens"] == 2**31  # BIGINT column
    assert json.loads(row["attributes"]) == {c.RETRIES: 2**31}


def test_a_count_too_large_for_its_column_is_accepted_by_the_running_collector(collector):
    request = make_request([make_span({c.TARGET_ID: "bot", c.AGENT_STEP: 2**40})])
    response = httpx.post(collector.traces_url, content=request.SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}, timeout=30)
    assert response.status_code == 200, response.text
    [row] = collector.sql("select agent_step, attributes from spans")
    assert row["agent_step"] is None
    assert json.loads(row["attributes"]) == {c.AGENT_STEP: 2**40}


def test_repeated_attributes_give_each_span_its_own_values():
    spans = [make_span({c.TARGET_ID: f"bot-{i % 3}", c.GEN_AI_USAGE_INPUT_TOKENS: i, "server.address": "api",
                        "http.status_code": 200 + i % 2}) for i in range(50)]
    first = rows(make_request(spans))[1]
    again = rows(make_request(spans))[1]  # now every attribute is remembered from the first request
    assert first == again
    assert [r["target_id"] for r in first] == [f"bot-{i % 3}" for i in range(50)]
    assert [r["input_tokens"] for r in first] == list(range(50))
    assert [json.loads(r["attributes"]) for r in first] == [
        {"server.address": "api", "http.status_code": 200 + i % 2} for i in range(50)]


def test_a_key_given_twice_keeps_its_first_position_and_its_last_value():
    span = make_span({})
    span.attributes.extend([kv("a", int_value=1), kv("b", string_value="x"), kv("a", int_value=2)])
    [row] = rows(make_request([span]))[1]
    assert row["attributes"] == '{"a":2,"b":"x"}'


def test_outranked_and_derived_sources_stay_in_attributes():
    span = make_span({})
    span.attributes.extend([
        kv(c.OPENINFERENCE_MODEL_NAME, string_value="from-openinference"),  # outranked below
        kv(c.OPENINFERENCE_SPAN_KIND, string_value="LLM"),  # derived: operation 'chat', kept
        kv(c.GEN_AI_RESPONSE_MODEL, string_value="from-genai"),
        kv(c.ROLE, string_value="not-a-role"),  # invalid: NULL, kept
    ])
    [row] = rows(make_request([span]))[1]
    assert (row["response_model"], row["operation"], row["role"]) == ("from-genai", "chat", None)
    assert json.loads(row["attributes"]) == {
        c.OPENINFERENCE_SPAN_KIND: "LLM", c.OPENINFERENCE_MODEL_NAME: "from-openinference", c.ROLE: "not-a-role"}


def test_values_of_every_kind_keep_their_json_form():
    span = make_span({})
    nested = AnyValue()
    nested.kvlist_value.values.extend([kv("k", bool_value=True), kv("k", double_value=float("nan"))])
    listed = AnyValue()
    listed.array_value.values.extend([AnyValue(int_value=-3), AnyValue(bytes_value=b"\x00\xff")])
    long_text = "é" * 400  # longer than what the normalizer remembers
    span.attributes.extend([
        KeyValue(key="nested", value=nested), KeyValue(key="list", value=listed), kv("inf", double_value=float("inf")),
        kv("quote\"key", string_value='a "b" \\ c'), KeyValue(key="unset"), kv("long", string_value=long_text),
    ])
    [row] = rows(make_request([span]))[1]
    assert json.loads(row["attributes"]) == {
        "nested": {"k": "nan"}, "list": [-3, "AP8="], "inf": "inf", 'quote"key': 'a "b" \\ c', "unset": None,
        "long": long_text}


def test_events_give_json_and_the_first_chunk_time():
    span = make_span({}, start_ns=1_000_000_000)
    early = span.events.add(name=c.OPENLLMETRY_CHUNK_EVENT, time_unix_nano=999_000_000)  # before start: ignored
    early.attributes.append(kv("i", int_value=0))
    span.events.add(name='choice "0"', time_unix_nano=1_100_000_000)
    chunk = span.events.add(name=c.OPENLLMETRY_CHUNK_EVENT, time_unix_nano=1_250_000_000)
    chunk.attributes.extend([kv("i", int_value=1), kv("i", int_value=2)])
    span.events.add(name=c.OPENINFERENCE_FIRST_TOKEN_EVENT, time_unix_nano=1_300_000_000)
    [row] = rows(make_request([span]))[1]
    assert row["ttft_s"] == 0.25
    assert json.loads(row["events"]) == [
        {"name": c.OPENLLMETRY_CHUNK_EVENT, "time_unix_nano": 999_000_000, "attributes": {"i": 0}},
        {"name": 'choice "0"', "time_unix_nano": 1_100_000_000, "attributes": {}},
        {"name": c.OPENLLMETRY_CHUNK_EVENT, "time_unix_nano": 1_250_000_000, "attributes": {"i": 2}},
        {"name": c.OPENINFERENCE_FIRST_TOKEN_EVENT, "time_unix_nano": 1_300_000_000, "attributes": {}},
    ]


def test_links_and_the_time_columns():
    span = make_span({}, start_ns=1_700_000_000_123_456_789, duration_s=1.5)
    link = span.links.add(trace_id=bytes(range(16)), span_id=bytes(range(8)))
    link.attributes.append(kv("why", string_value="follows"))
    [row] = rows(make_request([span]))[1]
    assert json.loads(row["links"]) == [
        {"trace_id": bytes(range(16)).hex(), "span_id": bytes(range(8)).hex(), "attributes": {"why": "follows"}}]
    assert row["start_unix_nano"] == 1_700_000_000_123_456_789
    assert row["start_time"].isoformat() == "2023-11-14T22:13:20.123456+00:00"
    assert row["end_time"].isoformat() == "2023-11-14T22:13:21.623456+00:00"
    assert row["duration_s"] == 1.5


def test_protobuf_and_json_bodies_give_the_same_rows():
    span = make_span({c.TARGET_ID: "bot", "x": [1, "two"], c.GEN_AI_USAGE_OUTPUT_TOKENS: 4}, parent_span_id=b"p" * 8)
    span.events.add(name="e", time_unix_nano=span.start_time_unix_nano).attributes.append(kv("k", bool_value=False))
    request = make_request([span], resource={c.SERVICE_NAME: "svc", c.ROLE: "orchestration"})
    assert rows(request) == rows(request, via_json=True)
    assert rows(request)[1][0]["role"] == "orchestration"  # from the resource


@pytest.mark.parametrize("limit_bytes", [300, 1024 * 1024])
def test_limits_give_the_same_reasons_whether_or_not_the_request_is_longer_than_the_text_limit(limit_bytes):
    limits = _otlp.SpanLimits(max_attributes=4, max_attribute_bytes=limit_bytes)
    ok = make_span({"a": 1})
    too_many = make_span({f"k{i}": i for i in range(5)})
    event_heavy = make_span({})
    event_heavy.events.add(name="e").attributes.extend(kv(f"k{i}", int_value=i) for i in range(5))
    bad_kind = Span(trace_id=b"t" * 16, span_id=b"s" * 8, kind=9, start_time_unix_nano=1, end_time_unix_nano=2)
    filler = make_span({"filler": "y" * 200})  # makes the request longer than 300 bytes
    refused, stored = rows(make_request([ok, too_many, event_heavy, bad_kind, filler]), limits)
    assert [r.split(": ", 1)[1] for r in refused] == [
        "span has 5 attributes; the limit is 4", "event 0 has 5 attributes; the limit is 4",
        "kind 9 is not an OTLP SpanKind (0-5)"]
    assert len(stored) == 2


def test_a_long_value_is_refused_when_the_request_is_longer_than_the_text_limit():
    limits = _otlp.SpanLimits(max_attributes=16, max_attribute_bytes=300)
    refused, stored = rows(make_request([make_span({"prompt": "z" * 301}), make_span({"prompt": "z" * 250})]), limits)
    assert [r.split(": ", 1)[1] for r in refused] == ["span attribute 'prompt' has a value longer than 300 bytes"]
    assert len(stored) == 1


def test_the_attribute_cache_stays_within_its_bounds():
    made = []
    cache = _walk._BoundedCache(lambda key: made.append(key) or key.upper(), entries=3, max_bytes=4)
    assert [cache[k] for k in (b"a", b"b", b"a", b"toolong")] == [b"A", b"B", b"A", b"TOOLONG"]
    assert made == [b"a", b"b", b"toolong"] and b"toolong" not in cache
    for key in (b"c", b"d", b"e"):
        assert cache[key] == key.upper()
    assert len(cache) <= 3


# --- the receive path parses a protobuf body only as its lean view ------------------------------------
BAD_KEY_VALUE = b"\x0a\x01k\x12\x03\x0a\x01\xff"
"""A KeyValue whose string value is not UTF-8: valid wire format, invalid protobuf."""


def _lean_body(place: str) -> bytes:
    """A request whose only invalid part is BAD_KEY_VALUE, at ``place``."""
    good = make_span({c.TARGET_ID: "t", c.GEN_AI_REQUEST_MODEL: "m"})
    lean = _otlp.LeanRequest.FromString(make_request([good, make_span({}, trace_id=bytes(16))]).SerializeToString())
    rs = lean.resource_spans[0]
    ss = rs.scope_spans[0]
    if place == "span attribute":
        ss.spans[0].attributes.append(BAD_KEY_VALUE)
    elif place == "attribute of a refused span":
        ss.spans[1].attributes.append(BAD_KEY_VALUE)
    elif place == "event attribute":
        ss.spans[0].events.add(name="e", time_unix_nano=ss.spans[0].start_time_unix_nano).attributes.append(BAD_KEY_VALUE)
    elif place == "link attribute":
        ss.spans[0].links.add(trace_id=os.urandom(16), span_id=os.urandom(8)).attributes.append(BAD_KEY_VALUE)
    elif place == "resource attribute":
        rs.resource.attributes.append(BAD_KEY_VALUE)
    elif place == "scope attribute":
        ss.scope.attributes.append(BAD_KEY_VALUE)
    return lean.SerializeToString()


@pytest.mark.parametrize("place", ["span attribute", "attribute of a refused span", "event attribute",
                                   "link attribute", "resource attribute", "scope attribute"])
def test_a_body_invalid_anywhere_is_refused_whole_though_only_its_lean_view_was_parsed(place):
    body = _lean_body(place)
    with pytest.raises(_otlp.BadRequest, match="not a valid OTLP protobuf"):
        _otlp.decode(body, _otlp.PROTOBUF)  # the full parse refuses it ...
    decoded = _otlp.decode_lean(body, _otlp.PROTOBUF)  # ... the lean one cannot see it yet ...
    with pytest.raises(_otlp.BadRequest, match="not a valid OTLP protobuf"):
        _ingest.prepare(decoded, LIMITS, NO_FILLING)  # ... and normalizing refuses the body whole


def test_a_resource_and_scope_split_over_the_wire_merge_as_in_a_full_parse():
    """Protobuf merges repeated occurrences of a message field; the lean view keeps resources and
    scopes as messages so they merge the same way (one occurrence per attribute here)."""
    request = make_request([make_span({c.TARGET_ID: "t"})], resource={"service.name": "svc"})
    rs = request.resource_spans[0]
    extra_resource = make_request([], resource={"deployment.environment": "prod"}).resource_spans[0].resource
    scope_spans = rs.scope_spans[0].SerializeToString() + wire_field(1, b"\x0a\x05later")  # ScopeSpans.scope again
    wire = (wire_field(1, rs.resource.SerializeToString()) + wire_field(1, extra_resource.SerializeToString())
            + wire_field(2, scope_spans))  # ResourceSpans: resource twice, then its scope spans
    body = wire_field(1, wire)  # ExportTraceServiceRequest.resource_spans
    full = _ingest.prepare(_otlp.decode(body, _otlp.PROTOBUF), LIMITS, NO_FILLING)[1].to_pylist()
    lean = _ingest.prepare(_otlp.decode_lean(body, _otlp.PROTOBUF), LIMITS, NO_FILLING)[1].to_pylist()
    assert lean == full
    assert json.loads(lean[0]["resource"]) == {"service.name": "svc", "deployment.environment": "prod"}
    assert lean[0]["scope_name"] == "later"
