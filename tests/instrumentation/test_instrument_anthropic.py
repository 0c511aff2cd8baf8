"""instrument() on the real anthropic SDK, driven through httpx MockTransport (no network)."""

from __future__ import annotations

import asyncio

import anthropic
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import meritlens.instrumentation as ml
from meritlens.instrumentation import conventions as c
from tests.instrumentation.llm_fakes import (
    RETRY_NOW,
    Script,
    anthropic_client,
    anthropic_events,
    anthropic_message,
    async_anthropic_client,
    attrs,
    expected_cost,
    json_response,
    sse_response,
    status_response,
)

MODEL = "claude-3-5-sonnet-20241022"
MESSAGES = [{"role": "user", "content": "Bonjour?"}]


def test_message_with_cache_tokens_counts_input_once(spans):
    body = anthropic_message(input_tokens=50, output_tokens=30, cache_read=1000, cache_creation=200)
    client = ml.instrument(anthropic_client(Script(json_response(body))), target="support-bot/answer")

    message = client.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)

    assert isinstance(message, anthropic.types.Message)
    assert message.content[0].text == "Bonjour"
    span = spans.one()
    assert span.name == f"chat {MODEL}"
    assert span.kind is SpanKind.CLIENT
    assert attrs(span) == {
        c.GEN_AI_OPERATION_NAME: "chat",
        c.GEN_AI_PROVIDER_NAME: "anthropic",
        c.ROLE: "application",
        c.TARGET_ID: "support-bot/answer",
        c.GEN_AI_REQUEST_MODEL: MODEL,
        c.GEN_AI_REQUEST_STREAM: False,
        c.GEN_AI_RESPONSE_MODEL: MODEL,
        c.GEN_AI_RESPONSE_ID: "msg_01",
        c.GEN_AI_RESPONSE_FINISH_REASONS: ["end_turn"],
        c.TOOL_CALLS: 0,
        # Anthropic reports cache reads and writes beside input_tokens: GenAI input is their sum, once.
        c.GEN_AI_USAGE_INPUT_TOKENS: 1250,
        c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 1000,
        c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 200,
        c.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
        c.COST_USD: pytest.approx(expected_cost("anthropic", MODEL, 1250, 30, cache_read=1000, cache_write=200)),
        c.RETRIES: 0,
    }
    # $3/M input, $0.30/M cache read, $3.75/M cache write, $15/M output
    assert attrs(span)[c.COST_USD] == pytest.approx((50 * 3 + 1000 * 0.30 + 200 * 3.75 + 30 * 15) / 1e6)


def test_async_message(spans):
    client = ml.instrument(async_anthropic_client(Script(json_response(anthropic_message()))))
    message = asyncio.run(client.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES))
    assert message.usage.input_tokens == 50
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 50
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS not in span_attrs


def test_raw_stream(spans):
    events = anthropic_events(input_tokens=20, output_tokens=15, cache_read=100, cache_creation=0)
    client = ml.instrument(anthropic_client(Script(sse_response(events, named=True, done=False))))

    stream = client.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES, stream=True)
    assert isinstance(stream, anthropic.Stream)
    kinds = [event.type for event in stream]

    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_REQUEST_STREAM] is True
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert span_attrs[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 100
    assert span_attrs[c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 0
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 15  # from message_delta, not message_start's placeholder
    assert span_attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] == ["end_turn"]
    assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
    assert span_attrs[c.TOOL_CALLS] == 0


def test_messages_stream_helper(spans):
    events = anthropic_events(tool_uses=[("get_weather", "toolu_1")])
    client = ml.instrument(anthropic_client(Script(sse_response(events, named=True, done=False))))

    with client.messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert text == "Bonjour"
    assert final.usage.output_tokens == 30
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 50
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert span_attrs[c.TOOL_CALLS] == 1
    assert span_attrs[c.TOOL_CALL_NAMES] == ["get_weather"]
    assert span_attrs[c.TOOL_CALL_IDS] == ["toolu_1"]
    assert span_attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_use"]


def test_async_stream_helper(spans):
    client = ml.instrument(async_anthropic_client(Script(sse_response(anthropic_events(), named=True, done=False))))

    async def main():
        async with client.messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES) as stream:
            return "".join([text async for text in stream.text_stream])

    assert asyncio.run(main()) == "Bonjour"
    assert attrs(spans.one())[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 30


def test_tool_use_non_stream(spans):
    body = anthropic_message(tool_uses=[("search", "toolu_a"), ("fetch", "toolu_b")])
    client = ml.instrument(anthropic_client(Script(json_response(body))))
    client.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    span_attrs = attrs(spans.one())
    assert span_attrs[c.TOOL_CALLS] == 2
    assert span_attrs[c.TOOL_CALL_NAMES] == ["search", "fetch"]
    assert span_attrs[c.TOOL_CALL_IDS] == ["toolu_a", "toolu_b"]


def test_retry_429_then_200(spans):
    script = Script(status_response(429, RETRY_NOW), json_response(anthropic_message()))
    client = ml.instrument(anthropic_client(script, max_retries=2))
    client.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    assert len(script.requests) == 2
    span = spans.one()
    assert attrs(span)[c.RETRIES] == 1
    assert span.status.status_code is StatusCode.UNSET


def test_server_error(spans):
    client = ml.instrument(anthropic_client(Script(status_response(500))))
    with pytest.raises(anthropic.InternalServerError) as caught:
        client.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    assert caught.value.status_code == 500
    span = spans.one()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[c.ERROR_TYPE] == "InternalServerError"
    assert c.COST_USD not in attrs(span)


def test_early_closed_stream_keeps_known_input_but_no_output(spans):
    client = ml.instrument(
        anthropic_client(Script(sse_response(anthropic_events(input_tokens=20), named=True, done=False)))
    )
    with client.messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES) as stream:
        for event in stream:
            if event.type == "content_block_start":
                break
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 20  # reported by message_start
    assert c.GEN_AI_USAGE_OUTPUT_TOKENS not in span_attrs  # the final count never arrived
    assert c.COST_USD not in span_attrs
    assert c.TOOL_CALLS not in span_attrs


def _sdk_tracing_client(script, provider):
    return anthropic_client(script, open_telemetry={"tracer_provider": provider})


def test_sdk_native_span_is_switched_off_so_the_call_counts_once(spans):
    sdk_exporter = InMemorySpanExporter()
    sdk_provider = TracerProvider()
    sdk_provider.add_span_processor(SimpleSpanProcessor(sdk_exporter))

    plain = _sdk_tracing_client(Script(json_response(anthropic_message())), sdk_provider)
    plain.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert len(sdk_exporter.get_finished_spans()) == 1  # the SDK does emit its own span

    client = ml.instrument(_sdk_tracing_client(Script(json_response(anthropic_message())), sdk_provider))
    client.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert len(sdk_exporter.get_finished_spans()) == 1  # none added by the instrumented client
    assert len(spans.all()) == 1

    kept = ml.instrument(
        _sdk_tracing_client(Script(json_response(anthropic_message())), sdk_provider), keep_sdk_spans=True
    )
    kept.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert len(sdk_exporter.get_finished_spans()) == 2
    ml.uninstrument(client)
    client.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert len(sdk_exporter.get_finished_spans()) == 3  # restored


def test_raw_response(spans):
    client = ml.instrument(anthropic_client(Script(json_response(anthropic_message(cache_read=10)))))
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert raw.parse().usage.cache_read_input_tokens == 10
    assert attrs(spans.one())[c.GEN_AI_USAGE_INPUT_TOKENS] == 60


def test_count_tokens_is_not_a_generation(spans):
    client = ml.instrument(anthropic_client(Script(json_response({"input_tokens": 12}))))
    assert client.messages.count_tokens(model=MODEL, messages=MESSAGES).input_tokens == 12
    assert spans.all() == []


def test_async_raw_response_stream(spans):
    events = anthropic_events(input_tokens=7, output_tokens=3)
    client = ml.instrument(async_anthropic_client(Script(sse_response(events, named=True, done=False))))

    async def main():
        raw = await client.messages.with_raw_response.create(model=MODEL, max_tokens=10, messages=MESSAGES, stream=True)
        stream = await raw.parse()
        return [event.type async for event in stream]

    kinds = asyncio.run(main())
    assert kinds[-1] == "message_stop"
    span_attrs = attrs(spans.one())
    assert (span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS], span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS]) == (7, 3)
