"""RedactingSpanExporter with the SDK's real TracerProvider and InMemorySpanExporter: attributes, events, links,
resource, name and status masked in copies of the spans; identifiers, times and the SDK's dropped counts kept."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import meritlens.instrumentation as ml
from meritlens.instrumentation import RedactingSpanExporter
from meritlens.instrumentation import conventions as c
from meritlens.instrumentation.redaction import RedactionPolicyError
from tests.redaction_support import example_policy, write_policy

EMAIL = "jane.doe@example.com"
MESSAGES = json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"Hi, I am {EMAIL}\nthanks"}]}])


def _pipeline(policy_path, resource=None, **provider_options):
    exported = InMemorySpanExporter()
    exporter = RedactingSpanExporter(exported, policy_path)
    provider = TracerProvider(resource=Resource.create(resource or {"service.name": "shop"}), **provider_options)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter, exported


def test_every_part_of_a_span_is_redacted_and_identifiers_kept(tmp_path):
    provider, exporter, exported = _pipeline(example_policy(tmp_path))
    tracer = provider.get_tracer("some.instrumentation", "1.2")
    with tracer.start_as_current_span("root") as root:
        root_context = root.get_span_context()
        with tracer.start_as_current_span(f"lookup {EMAIL}", kind=SpanKind.CLIENT,
                                          links=[Link(root_context, {"note": f"for {EMAIL}"})]) as span:
            span.set_attributes({
                c.GEN_AI_RESPONSE_ID: "chatcmpl-4111111111111111", c.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                c.TASK_ID: EMAIL, c.TARGET_ID: "shop/answer", c.GEN_AI_USAGE_INPUT_TOKENS: 12,
                "gen_ai.prompt.0.content": f"mail {EMAIL}",  # OpenLLMetry's content attributes
                "gen_ai.completion.0.content": "call +1 555 123 4567",
                "llm.input_messages.0.message.content": "card 4111 1111 1111 1111",  # OpenInference's
                c.GEN_AI_INPUT_MESSAGES: MESSAGES, "user.id": "u-17", "db.password": "hunter2",
                "tags": ("a", EMAIL),
            })
            span.add_event("gen_ai.user.message", {"gen_ai.system": "openai", "content": f"I am {EMAIL}"})
            span.add_event(c.GEN_AI_OPERATION_DETAILS_EVENT, {c.GEN_AI_OUTPUT_MESSAGES: MESSAGES})
            span.set_status(Status(StatusCode.ERROR, f"no account for {EMAIL}"))
            context = span.get_span_context()
    (child, _) = exported.get_finished_spans()
    policy = exporter.policy
    assert child.name == "lookup [redacted:email]"
    assert child.status.status_code is StatusCode.ERROR
    assert child.status.description == "no account for [redacted:email]"
    assert dict(child.attributes) == {
        c.GEN_AI_RESPONSE_ID: "chatcmpl-4111111111111111", c.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
        c.TASK_ID: EMAIL, c.TARGET_ID: "shop/answer", c.GEN_AI_USAGE_INPUT_TOKENS: 12,
        "gen_ai.prompt.0.content": "mail [redacted:email]",
        "gen_ai.completion.0.content": "call [redacted:phone]",
        "llm.input_messages.0.message.content": "card [redacted:payment_card]",
        c.GEN_AI_INPUT_MESSAGES: json.dumps(json.loads(MESSAGES.replace(EMAIL, "[redacted:email]")),
                                            separators=(",", ":")),
        "user.id": policy.hash_text("u-17"), "tags": ("a", "[redacted:email]"),
    }
    events = {e.name: dict(e.attributes) for e in child.events}
    assert events["gen_ai.user.message"] == {"gen_ai.system": "openai", "content": "I am [redacted:email]"}
    assert json.loads(events[c.GEN_AI_OPERATION_DETAILS_EVENT][c.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] \
        == "Hi, I am [redacted:email]\nthanks"
    assert [dict(link.attributes) for link in child.links] == [{"note": "for [redacted:email]"}]
    assert child.links[0].context == root_context
    assert (child.context, child.parent, child.kind) == (context, root_context, SpanKind.CLIENT)
    assert child.start_time < child.end_time and child.instrumentation_scope.name == "some.instrumentation"
    assert exporter.counts() == {
        ("email", "masked"): 8, ("phone", "masked"): 1, ("payment_card", "masked"): 1,
        ("key:user.id", "hashed"): 1, ("key:*.password", "dropped"): 1,
    }


def test_a_span_the_policy_leaves_is_passed_on_as_it_is(tmp_path):
    recorded = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    for name in ("plain", f"to {EMAIL}"):
        with provider.get_tracer("t").start_as_current_span(name):
            pass
    plain, secret = recorded.get_finished_spans()
    exported = InMemorySpanExporter()
    RedactingSpanExporter(exported, example_policy(tmp_path)).export([plain, secret])
    first, second = exported.get_finished_spans()
    assert first is plain and second is not secret and second.name == "to [redacted:email]"
    assert secret.name == f"to {EMAIL}"  # the SDK's span is never changed


def test_the_resource_is_redacted_once_and_counted_for_every_span(tmp_path):
    provider, exporter, exported = _pipeline(example_policy(tmp_path), {"service.name": "shop", "host.ip": "10.0.0.7"})
    for name in ("a", "b"):
        with provider.get_tracer("t").start_as_current_span(name):
            pass
    first, second = exported.get_finished_spans()
    assert dict(first.resource.attributes)["host.ip"] == "[redacted:ipv4]"
    assert first.resource is second.resource and first.resource.attributes["service.name"] == "shop"
    assert exporter.counts() == {("ipv4", "masked"): 2}


def test_the_sdks_dropped_counts_are_kept(tmp_path):
    provider, _, exported = _pipeline(example_policy(tmp_path), span_limits=SpanLimits(max_span_attributes=2))
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attributes({"b": 1, "c": 2, "a": EMAIL, "d": 3})  # the SDK keeps the last two
    (copy,) = exported.get_finished_spans()
    assert dict(copy.attributes) == {"a": "[redacted:email]", "d": 3} and copy.dropped_attributes == 2


def test_configure_wraps_its_exporter_and_refuses_an_invalid_policy(tmp_path):
    exported = InMemorySpanExporter()
    provider = ml.configure(span_exporter=exported, redact=example_policy(tmp_path), service_name="svc")
    with provider.get_tracer("t").start_as_current_span(f"x {EMAIL}"):
        pass
    ml.shutdown()
    (span,) = exported.get_finished_spans()
    assert span.name == "x [redacted:email]"
    bad = write_policy(tmp_path, "[mask]\nbuiltins = ['ssn']", name="bad.toml")
    with pytest.raises(RedactionPolicyError, match="mask.builtins: unknown built-in pattern 'ssn'"):
        ml.configure(span_exporter=InMemorySpanExporter(), redact=bad)
