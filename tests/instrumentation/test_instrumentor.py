"""MeritlensInstrumentor in process: which clients it instruments, which target they carry, what
uninstrument() restores, and how other instrumentations' spans of the same call are marked.
(tests/zerocode runs it under `opentelemetry-instrument` end to end.)"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import meritlens.instrumentation as ml
from meritlens.instrumentation import _instrumentor
from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._instrumentor import MeritlensInstrumentor, agent_target
from tests.instrumentation.llm_fakes import (
    Script,
    anthropic_client,
    anthropic_message,
    async_openai_client,
    attrs,
    chat_completion,
    json_response,
    openai_client,
)

CLASSES = (openai.OpenAI, openai.AsyncOpenAI, openai.AzureOpenAI, openai.AsyncAzureOpenAI,
           anthropic.Anthropic, anthropic.AsyncAnthropic)
AGENT_TARGET = "agent-bot/answer"


@pytest.fixture
def agent(spans, monkeypatch) -> Iterator[MeritlensInstrumentor]:
    """The instrumentor as `opentelemetry-instrument` runs it, with MERITLENS_TARGET set."""
    monkeypatch.setenv(_instrumentor.TARGET_ENV, AGENT_TARGET)
    instrumentor = MeritlensInstrumentor()
    instrumentor.instrument()
    yield instrumentor
    instrumentor.uninstrument()


def _chat(client) -> None:
    client.chat.completions.create(model="gpt-4o-mini", messages=[])


def test_every_new_client_is_observed_and_uninstrument_restores_the_classes(spans, monkeypatch):
    before = {cls: dict(cls.__dict__) for cls in CLASSES}
    monkeypatch.setenv(_instrumentor.TARGET_ENV, AGENT_TARGET)
    instrumentor = MeritlensInstrumentor()
    instrumentor.instrument()
    try:
        assert all(dict(cls.__dict__) != before[cls] for cls in (openai.OpenAI, anthropic.Anthropic))
        client = openai_client(Script(json_response(chat_completion(cached_tokens=40))))
        _chat(client)
        claude = anthropic_client(Script(json_response(anthropic_message(cache_read=1000, cache_creation=200))))
        claude.messages.create(model="claude-3-5-sonnet-20241022", max_tokens=10, messages=[])
        openai_span, claude_span = spans.all()
        assert attrs(openai_span)[c.TARGET_ID] == attrs(claude_span)[c.TARGET_ID] == AGENT_TARGET
        assert attrs(openai_span)[c.ROLE] == c.ROLE_APPLICATION
        assert attrs(openai_span)[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 40
        assert attrs(claude_span)[c.GEN_AI_USAGE_INPUT_TOKENS] == 1250  # cache counted once
        assert c.COST_USD in attrs(claude_span) and attrs(claude_span)[c.RETRIES] == 0
    finally:
        instrumentor.uninstrument()
    assert {cls: dict(cls.__dict__) for cls in CLASSES} == before
    _chat(client)  # created while instrumented: uninstrumented too
    _chat(openai_client(Script(json_response(chat_completion()))))
    assert len(spans.all()) == 2


def test_async_clients_and_copies_carry_the_agent_target(spans, agent):
    import asyncio

    client = async_openai_client(Script(json_response(chat_completion())))
    asyncio.run(client.with_options(timeout=5).chat.completions.create(model="gpt-4o-mini", messages=[]))
    assert attrs(spans.one())[c.TARGET_ID] == AGENT_TARGET


def test_the_call_site_and_the_task_name_the_target_before_the_agent(spans, agent):
    explicit = ml.instrument(openai_client(Script(json_response(chat_completion()))), target="explicit/t")
    _chat(explicit)
    with ml.task("t-1", target="task/t"):
        _chat(openai_client(Script(json_response(chat_completion()))))
    targets = [attrs(span).get(c.TARGET_ID) for span in spans.all() if span.name.startswith("chat")]
    assert targets == ["explicit/t", "task/t"]
    agent.uninstrument()
    _chat(explicit)  # instrumented by the application itself: still observed
    assert len([span for span in spans.all() if span.name.startswith("chat")]) == 3
    agent.instrument()  # the fixture uninstruments it again


def test_the_target_comes_from_the_variable_then_the_resource(monkeypatch):
    provider = TracerProvider(resource=Resource.create({c.TARGET_ID: "resource/t"}))
    monkeypatch.delenv(_instrumentor.TARGET_ENV, raising=False)
    assert agent_target(provider) == "resource/t"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"{c.TARGET_ID}=from-env/t,service.name=x")
    assert agent_target(object()) == "from-env/t"  # no SDK provider yet: the variable itself
    monkeypatch.setenv(_instrumentor.TARGET_ENV, "variable/t")
    assert agent_target(provider) == "variable/t"
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    monkeypatch.delenv(_instrumentor.TARGET_ENV)
    assert agent_target(TracerProvider(resource=Resource.create({}))) is None


def test_without_a_target_the_span_carries_none(spans, monkeypatch):
    monkeypatch.delenv(_instrumentor.TARGET_ENV, raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    instrumentor = MeritlensInstrumentor()
    instrumentor.instrument()
    try:
        _chat(openai_client(Script(json_response(chat_completion()))))
    finally:
        instrumentor.uninstrument()
    assert c.TARGET_ID not in attrs(spans.one())


def test_a_failure_to_instrument_never_reaches_the_application(spans, agent, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("meritlens bug")

    monkeypatch.setattr(_instrumentor, "instrument_client", broken)
    client = openai_client(Script(json_response(chat_completion())))
    assert client.chat.completions.create(model="gpt-4o-mini", messages=[]).choices[0].message.content == "Hello!"
    assert spans.all() == []


def test_other_instrumentations_spans_of_the_same_call_are_marked(spans, agent):
    other = spans.provider.get_tracer("some.other.instrumentation")

    def handler(request: httpx2.Request) -> httpx2.Response:
        # Opened inside the call, as OpenInference's span is (it wraps the client's request), and an
        # HTTP span beside it, which is no LLM call.
        with other.start_as_current_span("ChatCompletion", attributes={c.OPENINFERENCE_SPAN_KIND: "LLM"}):
            pass
        with other.start_as_current_span("POST"):
            pass
        return json_response(chat_completion())

    client = openai_client(handler)
    # Around the call, as openai-v2's and OpenLLMetry's are (one inside the other when both are installed).
    with other.start_as_current_span("chat gpt-4o-mini", attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT}):
        with other.start_as_current_span("openai.chat", attributes={c.OPENLLMETRY_REQUEST_TYPE: "chat"}):
            _chat(client)
    with other.start_as_current_span("chat", attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT}):
        with other.start_as_current_span("handle ticket"):  # not an LLM call: the chain stops here
            _chat(client)
    roles = [(span.name, attrs(span).get(c.ROLE)) for span in spans.all()]
    assert roles == [
        ("ChatCompletion", c.ROLE_DUPLICATE),
        ("POST", None),
        ("chat gpt-4o-mini", c.ROLE_APPLICATION),
        ("openai.chat", c.ROLE_DUPLICATE),
        ("chat gpt-4o-mini", c.ROLE_DUPLICATE),
        ("ChatCompletion", c.ROLE_DUPLICATE),
        ("POST", None),
        ("chat gpt-4o-mini", c.ROLE_APPLICATION),
        ("handle ticket", None),
        ("chat", None),
    ]


def test_a_provider_given_in_code_receives_the_spans_until_uninstrument():
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = MeritlensInstrumentor()
    instrumentor.instrument(tracer_provider=provider, target="code/t")
    try:
        _chat(openai_client(Script(json_response(chat_completion()))))
    finally:
        instrumentor.uninstrument()
    [span] = exporter.get_finished_spans()
    assert attrs(span)[c.TARGET_ID] == "code/t"
    assert _instrumentor.config.tracer_provider is None  # the configure() it made is undone
