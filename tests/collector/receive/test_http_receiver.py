"""OTLP/HTTP receiver against the real collector process: encodings, idempotence, errors."""

from __future__ import annotations

import gzip
import json
import os
import zlib

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from meritlens.collector.process import _otlp
from meritlens.instrumentation import conventions as c
from tests.otlp_builders import json_request, json_span, make_request, make_span

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def _attrs(**values) -> list[dict]:
    out = []
    for key, value in values.items():
        if isinstance(value, bool):
            v = {"boolValue": value}
        elif isinstance(value, int):
            v = {"intValue": str(value)}
        elif isinstance(value, float):
            v = {"doubleValue": value}
        else:
            v = {"stringValue": value}
        out.append({"key": key, "value": v})
    return out


def _kv(pairs: dict) -> list[dict]:
    return [{"key": k, "value": v} for k, v in pairs.items()]


def _status(response: httpx.Response) -> status_pb2.Status:
    status = status_pb2.Status()
    if response.headers["content-type"].startswith("application/x-protobuf"):
        status.ParseFromString(response.content)
    else:
        json_format.Parse(response.text, status)
    return status


def test_protobuf_spans_are_stored_with_typed_columns(collector):
    span = make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 120, c.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
                      c.COST_USD: 0.25, c.GEN_AI_REQUEST_MODEL: "gpt-x", "custom.key": "kept"})
    r = httpx.post(collector.traces_url, content=make_request([span], {"service.name": "svc"}).SerializeToString(), headers=PB)
    assert r.status_code == 200
    response = ExportTraceServiceResponse()
    response.ParseFromString(r.content)
    assert response.partial_success.rejected_spans == 0
    rows = collector.sql("select trace_id, span_id, target_id, role, input_tokens, output_tokens, cost_usd, "
                         "request_model, service_name, attributes, resource from spans")
    assert len(rows) == 1
    row = rows[0]
    assert row["trace_id"] == span.trace_id.hex() and row["span_id"] == span.span_id.hex()
    assert (row["target_id"], row["role"], row["input_tokens"], row["output_tokens"]) == ("bot", "application", 120, 30)
    assert row["cost_usd"] == 0.25 and row["request_model"] == "gpt-x" and row["service_name"] == "svc"
    assert json.loads(row["attributes"]) == {"custom.key": "kept"}
    assert json.loads(row["resource"]) == {"service.name": "svc"}


def test_json_with_hex_ids_int64_strings_enums_and_unknown_fields(collector):
    span = json_span(_attrs(**{c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 7}))
    span["unknownField"] = {"x": 1}
    span["kind"] = 3
    doc = json_request([span])
    doc["somethingNew"] = True
    r = httpx.post(collector.traces_url, content=json.dumps(doc), headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert json.loads(r.text) == {}  # nothing rejected
    rows = collector.sql("select trace_id, span_id, kind, input_tokens from spans")
    assert rows == [{"trace_id": span["traceId"], "span_id": span["spanId"], "kind": 3, "input_tokens": 7}]


def test_gzip_and_deflate_bodies_and_chunked_transfer(collector):
    spans = [make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 1}) for _ in range(3)]
    body = make_request(spans[:1]).SerializeToString()
    r = httpx.post(collector.traces_url, content=gzip.compress(body), headers={**PB, "Content-Encoding": "gzip"})
    assert r.status_code == 200
    r = httpx.post(collector.traces_url, content=zlib.compress(make_request(spans[1:2]).SerializeToString()),
                   headers={**PB, "Content-Encoding": "deflate"})
    assert r.status_code == 200
    payload = gzip.compress(make_request(spans[2:]).SerializeToString())

    def chunks():
        for i in range(0, len(payload), 7):
            yield payload[i:i + 7]

    r = httpx.post(collector.traces_url, content=chunks(), headers={**PB, "Content-Encoding": "gzip"})
    assert r.status_code == 200
    assert collector.sql("select count(*) n from spans") == [{"n": 3}]


def test_the_same_spans_posted_twice_count_once(collector):
    spans = [make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10}) for _ in range(4)]
    body = make_request(spans).SerializeToString()
    for _ in range(2):
        assert httpx.post(collector.traces_url, content=body, headers=PB).status_code == 200
    # ... and once more inside one request, duplicated
    assert httpx.post(collector.traces_url, content=make_request(spans + spans).SerializeToString(), headers=PB).status_code == 200
    assert collector.sql("select count(*) n from spans") == [{"n": 4}]
    window = collector.sql("select value, sample_count from windows where metric = 'input_tokens' and scope = 'all'")
    assert window == [{"value": 40.0, "sample_count": 4}]


def test_empty_requests_succeed(collector):
    for headers, body in ((PB, b""), (JS, b""), (JS, b"{}"), (JS, b'{"resourceSpans": []}')):
        r = httpx.post(collector.traces_url, content=body, headers=headers)
        assert r.status_code == 200, (headers, body, r.text)
    assert collector.sql("select count(*) n from spans") == [{"n": 0}]


@pytest.mark.parametrize("body", [b" ", b" \r\n\t ", b" " * (10 * 1024 * 1024)], ids=["space", "mixed", "10MB"])
def test_a_json_body_of_whitespace_only_is_refused(collector, body):
    r = httpx.post(collector.traces_url, content=body, headers=JS, timeout=60)
    assert r.status_code == 400, r.text
    status = _status(r)
    assert status.code == code_pb2.INVALID_ARGUMENT and "body is not valid JSON" in status.message
    assert collector.sql("select count(*) n from spans") == [{"n": 0}]


def test_spans_with_invalid_ids_are_refused_one_by_one(collector):
    good = json_span(_attrs(**{c.TARGET_ID: "bot"}))
    short = json_span([], trace_id="abcd")
    zero = json_span([], span_id="0" * 16)
    not_hex = json_span([], trace_id="zz" * 16)
    r = httpx.post(collector.traces_url, content=json.dumps(json_request([good, short, zero, not_hex])), headers=JS)
    assert r.status_code == 200
    partial = json.loads(r.text)["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 3
    assert "trace_id must be 16 bytes" in partial["errorMessage"]
    assert "span_id must be 8 bytes and not all zero" in partial["errorMessage"]
    assert "is not a hex string" in partial["errorMessage"]
    assert collector.sql("select span_id from spans") == [{"span_id": good["spanId"]}]

    bad_pb = make_span({}, trace_id=bytes(16))
    r = httpx.post(collector.traces_url, content=make_request([bad_pb]).SerializeToString(), headers=PB)
    response = ExportTraceServiceResponse()
    response.ParseFromString(r.content)
    assert r.status_code == 200 and response.partial_success.rejected_spans == 1
    assert "trace_id" in response.partial_success.error_message


def test_invalid_promoted_values_stay_out_of_typed_columns_and_are_kept(collector):
    attrs = _kv({
        c.TARGET_ID: {"stringValue": "bot"},
        c.GEN_AI_USAGE_INPUT_TOKENS: {"intValue": "-1"},
        c.GEN_AI_USAGE_OUTPUT_TOKENS: {"stringValue": "12"},
        c.COST_USD: {"doubleValue": "NaN"},
        c.RETRIES: {"doubleValue": 1.5},
        c.ROLE: {"stringValue": "judge"},
    })
    r = httpx.post(collector.traces_url, content=json.dumps(json_request([json_span(attrs)])), headers=JS)
    assert r.status_code == 200, r.text
    row = collector.sql("select input_tokens, output_tokens, cost_usd, retries, role, attributes from spans")[0]
    assert (row["input_tokens"], row["output_tokens"], row["cost_usd"], row["retries"], row["role"]) == (None,) * 5
    kept = json.loads(row["attributes"])
    assert kept[c.GEN_AI_USAGE_INPUT_TOKENS] == -1
    assert kept[c.GEN_AI_USAGE_OUTPUT_TOKENS] == "12"
    assert kept[c.COST_USD] == "nan"
    assert kept[c.RETRIES] == 1.5
    assert kept[c.ROLE] == "judge"
    # A span whose role is invalid feeds no window, and nothing became a zero.
    assert collector.sql("select count(*) n from windows") == [{"n": 0}]


def test_malformed_bodies_get_400_with_a_status_in_the_request_encoding(collector):
    r = httpx.post(collector.traces_url, content=b"\x0a\xff\xff\xff\xff\x0f", headers=PB)
    assert r.status_code == 400
    status = _status(r)
    assert status.code == code_pb2.INVALID_ARGUMENT and "protobuf" in status.message

    for body, needle in ((b"{not json", "not valid JSON"), (b"[1, 2]", "must be an object"),
                         (b'{"resourceSpans": 5}', "must be an array"),
                         (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5, "traceId": "00"}]}]}]}', "")):
        r = httpx.post(collector.traces_url, content=body, headers=JS)
        assert r.status_code == 400, (body, r.text)
        status = _status(r)
        assert status.code == code_pb2.INVALID_ARGUMENT and needle in status.message

    r = httpx.post(collector.traces_url, content=b"\x1f\x8b\x08garbage", headers={**PB, "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "gzip" in _status(r).message


def test_a_body_invalid_only_inside_an_attribute_is_refused_whole_and_stores_nothing(collector):
    """The receiver parses protobuf bodies lazily (`_otlp.decode_lean`): an invalid part deep in the
    body, here a non-UTF-8 string in one attribute of the last span, still refuses the whole body."""
    spans = [make_span({c.TARGET_ID: "lean-check"}) for _ in range(3)]
    lean = _otlp.LeanRequest.FromString(make_request(spans).SerializeToString())
    lean.resource_spans[0].scope_spans[0].spans[2].attributes.append(b"\x0a\x01k\x12\x03\x0a\x01\xff")
    r = httpx.post(collector.traces_url, content=lean.SerializeToString(), headers=PB)
    assert r.status_code == 400, r.text
    assert "not a valid OTLP protobuf" in _status(r).message
    assert collector.sql("select count(*) n from spans where target_id = 'lean-check'") == [{"n": 0}]
    r = httpx.post(collector.traces_url, content=make_request(spans).SerializeToString(), headers=PB)
    assert r.status_code == 200
    assert collector.sql("select count(*) n from spans where target_id = 'lean-check'") == [{"n": 3}]


def test_oversized_bodies_and_gzip_bombs_get_413(tmp_path):
    from tests.conftest import CollectorProcess

    proc = CollectorProcess(tmp_path / "small.duckdb", ("--max-body-bytes", "65536")).start()
    try:
        big = make_request([make_span({"pad": "x" * 70_000})]).SerializeToString()
        r = httpx.post(proc.traces_url, content=big, headers=PB)
        assert r.status_code == 413 and "65536" in _status(r).message
        bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))
        assert len(bomb) < 100_000
        r = httpx.post(proc.traces_url, content=bomb, headers={**PB, "Content-Encoding": "gzip"})
        assert r.status_code == 413 and _status(r).code == code_pb2.RESOURCE_EXHAUSTED
        # The server is still healthy and lost nothing.
        ok = make_request([make_span({c.TARGET_ID: "bot"})]).SerializeToString()
        assert httpx.post(proc.traces_url, content=ok, headers=PB).status_code == 200
    finally:
        proc.stop()


@pytest.mark.parametrize("media_type", ["text/plain", "application/xml", ""])
def test_other_media_types_get_415(collector, media_type):
    headers = {"Content-Type": media_type} if media_type else {}
    r = httpx.post(collector.traces_url, content=b"{}", headers=headers)
    assert r.status_code == 415
    assert "unsupported media type" in _status(r).message


def test_unknown_content_encoding_gets_415(collector):
    r = httpx.post(collector.traces_url, content=b"x", headers={**PB, "Content-Encoding": "br"})
    assert r.status_code == 415 and "Content-Encoding" in _status(r).message


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_other_methods_get_405(collector, method):
    r = httpx.request(method, collector.traces_url, headers=JS)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert f"method {method} is not allowed" in _status(r).message


def test_events_links_and_resource_are_kept_losslessly(collector):
    span = json_span(_attrs(**{c.TARGET_ID: "bot"}))
    link_trace, link_span = os.urandom(16).hex(), os.urandom(8).hex()
    span["events"] = [{"name": "gen_ai.choice", "timeUnixNano": "5", "attributes": _attrs(index=0)}]
    span["links"] = [{"traceId": link_trace, "spanId": link_span}]
    span["attributes"] += _kv({"nested": {"kvlistValue": {"values": _attrs(a=1)}},
                               "list": {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "b"}]}}})
    doc = json_request([span], resource_attributes=_attrs(**{"service.name": "svc", "host.name": "h"}))
    assert httpx.post(collector.traces_url, content=json.dumps(doc), headers=JS).status_code == 200
    row = collector.sql("select attributes, resource, events, links from spans")[0]
    assert json.loads(row["attributes"]) == {"nested": {"a": 1}, "list": [1, "b"]}
    assert json.loads(row["resource"]) == {"service.name": "svc", "host.name": "h"}
    assert json.loads(row["events"]) == [{"name": "gen_ai.choice", "time_unix_nano": 5, "attributes": {"index": 0}}]
    assert json.loads(row["links"]) == [{"trace_id": link_trace, "span_id": link_span, "attributes": {}}]


def test_target_id_from_the_resource(collector):
    doc = json_request([json_span(_attrs(**{c.GEN_AI_USAGE_INPUT_TOKENS: 3}))],
                       resource_attributes=_attrs(**{c.TARGET_ID: "from-resource"}))
    assert httpx.post(collector.traces_url, content=json.dumps(doc), headers=JS).status_code == 200
    assert collector.sql("select target_id from spans") == [{"target_id": "from-resource"}]
