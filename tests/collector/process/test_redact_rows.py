"""The collector's SpanRedactor on span rows as the receive path makes them (real OTLP protobuf, normalize, Arrow):
what it rewrites, what it never touches, and that its column-wide prechecks never pass by a value the policy
changes, however the value is escaped in the JSON columns."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from meritlens.collector.process import _otlp
from meritlens.collector.process._normalize import normalize
from meritlens.collector.process._redact import LIST_COLUMNS, OBJECT_COLUMNS, TEXT_COLUMNS, SpanRedactor
from meritlens.instrumentation import conventions as c
from meritlens.instrumentation.redaction import RedactionPolicyError, Redactor, load_policy
from tests.otlp_builders import any_value, make_request, make_span
from tests.redaction_support import EVERY_BUILTIN, example_policy, write_policy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "bench"))

import spangen  # noqa: E402

EMAIL = "jane.doe@example.com"


def _kvs(attributes: dict) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def _table(spans, resource=None) -> pa.Table:
    body = make_request(spans, resource).SerializeToString()
    batch = normalize(_otlp.decode_lean(body, _otlp.PROTOBUF).lean, body=body)
    assert not batch.refused, batch.refused
    return batch.to_arrow()


def _span(attributes: dict, *, name="chat m", events=(), links=(), status: str = ""):
    span = make_span(attributes, name=name)
    for event_name, event_attributes in events:
        event = span.events.add(name=event_name, time_unix_nano=span.end_time_unix_nano)
        event.attributes.extend(_kvs(event_attributes))
    for link_attributes in links:
        link = span.links.add(trace_id=os.urandom(16), span_id=os.urandom(8))
        link.attributes.extend(_kvs(link_attributes))
    if status:
        span.status.code, span.status.message = 2, status
    return span


@pytest.fixture
def redactor(tmp_path) -> SpanRedactor:
    return SpanRedactor.from_file(example_policy(tmp_path))


def test_every_redacted_column_is_rewritten_and_the_others_stay(redactor):
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"I am {EMAIL}\nCUST-1234567"}]}])
    raw = _table([
        _span({c.TARGET_ID: EMAIL, c.TASK_ID: "CUST-1234567", c.GEN_AI_REQUEST_MODEL: "4111 1111 1111 1111",
               c.GEN_AI_RESPONSE_ID: "chatcmpl-4111111111111111", c.GEN_AI_USAGE_INPUT_TOKENS: 5,
               c.GEN_AI_INPUT_MESSAGES: messages, "user.id": "u-1", "app.password": "hunter2", "note": "ok"},
              name=f"send {EMAIL}", status=f"bounced: {EMAIL}",
              events=[("gen_ai.user.message", {"content": f"mail {EMAIL}", "user.id": "u-1"})],
              links=[{"from": "10.1.2.3"}]),
        _span({"note": "nothing here", c.GEN_AI_USAGE_OUTPUT_TOKENS: 7}),
    ], resource={c.SERVICE_NAME: "shop", "host.ip": "10.9.8.7"})
    stored = redactor.redact(raw)
    first, second = stored.to_pylist()
    hashed = redactor.policy.hash_text("u-1")
    assert (first["name"], first["status_message"]) == ("send [redacted:email]", "bounced: [redacted:email]")
    attributes = json.loads(first["attributes"])
    masked = messages.replace(EMAIL, "[redacted:email]").replace("CUST-1234567", "[redacted:customer_number]")
    assert attributes == {c.GEN_AI_RESPONSE_ID: "chatcmpl-4111111111111111", "user.id": hashed, "note": "ok",
                          c.GEN_AI_INPUT_MESSAGES: json.dumps(json.loads(masked), separators=(",", ":"))}
    assert json.loads(first["events"])[0]["attributes"] == {"content": "mail [redacted:email]", "user.id": hashed}
    assert json.loads(first["links"])[0]["attributes"] == {"from": "[redacted:ipv4]"}
    assert json.loads(first["resource"]) == json.loads(second["resource"]) == {c.SERVICE_NAME: "shop",
                                                                                "host.ip": "[redacted:ipv4]"}
    # The typed columns are evidence: ids, target, models and counts as sent.
    assert (first["target_id"], first["task_id"], first["request_model"], first["input_tokens"]) == \
        (EMAIL, "CUST-1234567", "4111 1111 1111 1111", 5)
    typed = [n for n in raw.column_names if n not in TEXT_COLUMNS + OBJECT_COLUMNS + LIST_COLUMNS]
    assert stored.select(typed).equals(raw.select(typed))
    assert second["attributes"] == raw.column("attributes")[1].as_py()
    assert redactor.counts() == {("email", "masked"): 4, ("customer_number", "masked"): 1, ("ipv4", "masked"): 3,
                                 ("key:user.id", "hashed"): 2, ("key:*.password", "dropped"): 1}


def test_attributes_all_dropped_leave_null_as_normalize_stores_none(tmp_path):
    redactor = SpanRedactor.from_file(write_policy(tmp_path, "[drop]\nkeys = ['secret.*']"))
    stored = redactor.redact(_table([_span({"secret.a": "x", "secret.b": 2})]))
    assert stored.column("attributes").to_pylist() == [None]


def test_realistic_spans_without_secrets_come_back_as_the_same_table(redactor):
    stream = spangen.SpanStream(3)
    for request in stream.requests(3000, 1000):
        table = spangen.rows(request)
        assert redactor.redact(table) is table
    assert redactor.counts() == {}


def test_a_pattern_re2_cannot_compile_is_refused_naming_it(tmp_path):
    path = write_policy(tmp_path, "[mask.patterns]\nlong_token = '.{1000}'")
    load_policy(path)  # Python's re reads it ...
    with pytest.raises(RedactionPolicyError) as raised:  # ... the collector's RE2 does not
        SpanRedactor.from_file(path)
    assert len(str(raised.value).splitlines()) == 1
    assert f"redaction policy {path}: mask.patterns.long_token: RE2 cannot compile it" in str(raised.value)


# --- the prechecks pass by no value the policy changes -----------------------------------------------------------

USER_PATTERNS = r"""
[mask.patterns]
customer = '\bCUST-[0-9]{6}\b'
password = '(?i)password"?\s*[:=]\s*"?[^",\s]+'
surname = 'Müller'
windows_user = 'C:\\Users\\\w+'
quoted = '"top secret"'
separated = '\d\W\d\d'
"""
FRAGMENTS = [
    EMAIL, "+1 555 123 4567", "4111 1111 1111 1111", "4111111111111111", "192.168.0.1", "fe80::1", "::1",
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv", "AKIAIOSFODNN7EXAMPLE", "Bearer abcDEF123456ghiJKL", "030 1234567",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig", "CUST-123456", "Müller", "password: hunter2", "top secret",
    'PASSWORD="x1"', "C:\\Users\\nick", "1-23", "1\n23", '"', "\\", "\\n", "\n", "\t", "\r", "\x0b", "é", "😀", " ",
    "a", "1", ":", "-", ".", "{", "[", "\":", "nick", "u00e9",
]
text = st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join)
KEYS = ["note", "user.id", "app.password", c.GEN_AI_RESPONSE_ID, "gen_ai.prompt.0.content", "host.ip"]


@st.composite
def attribute_values(draw):
    kind = draw(st.sampled_from(["text", "messages", "array", "number"]))
    if kind == "messages":
        messages = [{"role": "user", "parts": [{"type": "text", "content": draw(text)}]}]
        return json.dumps(messages, ensure_ascii=draw(st.booleans()))
    if kind == "array":
        return draw(st.lists(text, min_size=1, max_size=3))
    return draw(st.integers(0, 10**17)) if kind == "number" else draw(text)


PLACES = ("attribute", "event", "link", "name", "status", "resource")


@pytest.fixture(scope="module")
def every_rule(tmp_path_factory):
    folder = tmp_path_factory.mktemp("every-rule")
    path = write_policy(folder, EVERY_BUILTIN + USER_PATTERNS
                        + "[drop]\nkeys = ['*.password']\n[hash]\nkey_file = 'redaction.key'\nkeys = ['user.id']\n")
    return SpanRedactor.from_file(path), Redactor(load_policy(path))


def _one_value_table(place: str, key: str, value) -> pa.Table:
    """Rows of one span holding ``value`` in one place, and nothing else a rule could act on."""
    if place == "resource":
        return _table([_span({}, name="s")], resource={key: value})
    if place in ("name", "status"):
        value = value if isinstance(value, str) else json.dumps(value)
        return _table([_span({}, name=value if place == "name" else "s", status=value if place == "status" else "")])
    attributes = {key: value}
    return _table([_span(attributes if place == "attribute" else {}, name="s",
                         events=[("e", attributes)] if place == "event" else (),
                         links=[attributes] if place == "link" else ())])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(KEYS) | text.filter(bool),
                                  attribute_values()), min_size=1, max_size=6))
def test_the_stored_rows_are_the_policy_applied_to_every_decoded_value(every_rule, values):
    """One value per span, so that a span is searched for exactly that value: a precheck that passed by a value
    the policy changes would leave it as it is in the stored row."""
    redactor, exact = every_rule
    for place, key, value in values:
        raw = _one_value_table(place, key, value)
        stored = redactor.redact(raw)
        for column in TEXT_COLUMNS + OBJECT_COLUMNS + LIST_COLUMNS:
            before, after = raw.column(column)[0].as_py(), stored.column(column)[0].as_py()
            assert _decoded(column, after) == _expected(exact, column, before), (place, column, before)


def _decoded(column: str, value):
    return value if value is None or column in TEXT_COLUMNS else json.loads(value)


def _expected(exact: Redactor, column: str, value):
    """The policy applied to every value of the column, decoded, without any precheck."""
    if value is None:
        return None
    if column in TEXT_COLUMNS:
        return exact.text(value, Counter())
    document = json.loads(value)
    if column in OBJECT_COLUMNS:
        redacted = exact.attributes(document, Counter())
        return document if redacted is None else (redacted or None)
    for item in document:
        redacted = exact.attributes(item["attributes"], Counter())
        item["attributes"] = item["attributes"] if redacted is None else redacted
    return document
