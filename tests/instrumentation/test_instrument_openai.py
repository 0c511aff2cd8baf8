"""instrument() on the real openai SDK, driven through httpx MockTransport (no network)."""

from __future__ import annotations

import asyncio
import gc
import json

import httpx
import httpx2
import openai
import pytest
from opentelemetry.trace import SpanKind, StatusCode

import meritlens.instrumentation as ml
from meritlens.instrumentation import conventions as c
from tests.instrumentation.llm_fakes import (
    RETRY_NOW,
    Script,
    async_openai_client,
    attrs,
    chat_completion,
    chat_stream_handler,
    expected_cost,
    json_response,
    openai_client,
    responses_events,
    responses_object,
    sse_response,
    status_response,
)

MESSAGES = [{"role": "user", "content": "Say hello"}]


def test_chat_completion_sync_exact_attributes(spans):
    script = Script(
        json_response(chat_completion(prompt_tokens=100, completion_tokens=20, cached_tokens=40, reasoning_tokens=5))
    )
    client = ml.instrument(openai_client(script), target="support-bot/answer")

    result = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert isinstance(result, openai.types.chat.ChatCompletion)
    assert result.choices[0].message.content == "Hello!"
    span = spans.one()
    assert span.name == "chat gpt-4o-mini"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span) == {
        c.GEN_AI_OPERATION_NAME: "chat",
        c.GEN_AI_PROVIDER_NAME: "openai",
        c.ROLE: "application",
        c.TARGET_ID: "support-bot/answer",
        c.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
        c.GEN_AI_REQUEST_STREAM: False,
        c.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
        c.GEN_AI_RESPONSE_ID: "chatcmpl-123",
        c.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"],
        c.TOOL_CALLS: 0,
        # OpenAI counts cached tokens inside prompt_tokens: input stays 100, not 140.
        c.GEN_AI_USAGE_INPUT_TOKENS: 100,
        c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 40,
        c.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
        c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 5,
        c.COST_USD: pytest.approx(expected_cost("openai", "gpt-4o-mini-2024-07-18", 100, 20, cache_read=40)),
        c.RETRIES: 0,
    }
    # cached tokens are priced at the cache rate: cheaper than the same call uncached
    assert attrs(span)[c.COST_USD] < expected_cost("openai", "gpt-4o-mini-2024-07-18", 100, 20)


def test_chat_completion_async(spans):
    script = Script(json_response(chat_completion(prompt_tokens=7, completion_tokens=3)))
    client = ml.instrument(async_openai_client(script), target="t/async")

    async def main():
        return await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    result = asyncio.run(main())
    assert result.usage.prompt_tokens == 7
    span_attrs = attrs(spans.one())
    assert span_attrs[c.TARGET_ID] == "t/async"
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 7
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert span_attrs[c.RETRIES] == 0
    assert c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS not in span_attrs  # not reported, so not recorded


def test_stream_gets_usage_transparently(spans):
    script = Script(chat_stream_handler())
    client = ml.instrument(openai_client(script), target="t")

    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert isinstance(stream, openai.Stream)  # the very SDK object, not a proxy
    assert spans.all() == []  # the span lasts as long as the stream
    texts = [chunk.choices[0].delta.content for chunk in stream]  # would IndexError on a usage-only chunk

    assert texts == ["", "Hel", "lo", None]
    assert script.bodies()[0]["stream_options"] == {"include_usage": True}
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_REQUEST_STREAM] is True
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 10
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert span_attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert span_attrs[c.TOOL_CALLS] == 0
    assert 0 < span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] < 5
    assert span_attrs[c.COST_USD] == pytest.approx(expected_cost("openai", "gpt-4o-mini-2024-07-18", 10, 2))


def test_stream_without_usage_records_no_tokens(spans):
    script = Script(chat_stream_handler())
    client = ml.instrument(openai_client(script))

    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": False}
    )
    assert len(list(stream)) == 4
    assert script.bodies()[0]["stream_options"] == {"include_usage": False}  # the caller's choice stands
    span_attrs = attrs(spans.one())
    for key in (c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_OUTPUT_TOKENS, c.COST_USD):
        assert key not in span_attrs
    assert span_attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]


def test_stream_include_usage_off_in_instrument(spans):
    script = Script(chat_stream_handler())
    client = ml.instrument(openai_client(script), include_usage=False)
    assert len(list(client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True))) == 4
    assert "stream_options" not in script.bodies()[0]
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in attrs(spans.one())


def test_caller_requested_usage_chunk_is_passed_through(spans):
    script = Script(chat_stream_handler())
    client = ml.instrument(openai_client(script))
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 10
    assert attrs(spans.one())[c.GEN_AI_USAGE_INPUT_TOKENS] == 10


def test_stream_helper_and_final_completion(spans):
    client = ml.instrument(openai_client(Script(chat_stream_handler())))
    with client.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "content.done" in events
    assert final.choices[0].message.content == "Hello"
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 10
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 2


def test_async_stream(spans):
    client = ml.instrument(async_openai_client(Script(chat_stream_handler())))

    async def main():
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        assert isinstance(stream, openai.AsyncStream)
        return [chunk.choices[0].delta.content async for chunk in stream]

    assert asyncio.run(main()) == ["", "Hel", "lo", None]
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 10
    assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0


def test_tool_calls_non_stream(spans):
    body = chat_completion(tool_calls=[("get_weather", "call_1"), ("get_time", "call_2")], finish_reason="tool_calls")
    client = ml.instrument(openai_client(Script(json_response(body))))
    result = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert result.choices[0].message.tool_calls[1].function.name == "get_time"
    span_attrs = attrs(spans.one())
    assert span_attrs[c.TOOL_CALLS] == 2
    assert span_attrs[c.TOOL_CALL_NAMES] == ["get_weather", "get_time"]
    assert span_attrs[c.TOOL_CALL_IDS] == ["call_1", "call_2"]
    assert span_attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_calls"]


def test_tool_calls_stream(spans):
    client = ml.instrument(
        openai_client(Script(chat_stream_handler(tool_calls=[("search", "call_a"), ("fetch", "call_b")])))
    )
    list(client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True))
    span_attrs = attrs(spans.one())
    assert span_attrs[c.TOOL_CALLS] == 2
    assert span_attrs[c.TOOL_CALL_NAMES] == ["search", "fetch"]
    assert span_attrs[c.TOOL_CALL_IDS] == ["call_a", "call_b"]


def test_retry_429_then_200_is_one_span_with_one_retry(spans):
    script = Script(status_response(429, RETRY_NOW), json_response(chat_completion()))
    client = ml.instrument(openai_client(script, max_retries=2))

    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert len(script.requests) == 2
    span = spans.one()
    assert attrs(span)[c.RETRIES] == 1
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[c.GEN_AI_USAGE_INPUT_TOKENS] == 100


def test_retry_with_legacy_httpx_client(spans):
    # openai also accepts a classic httpx.Client; retries are counted there too.
    responses = iter(
        [httpx.Response(429, json={"error": {}}, headers=RETRY_NOW), httpx.Response(200, json=chat_completion())]
    )
    client = openai.OpenAI(
        api_key="k",
        base_url="http://fake-openai.test/v1",
        max_retries=2,
        http_client=httpx.Client(transport=httpx.MockTransport(lambda request: next(responses))),
    )
    ml.instrument(client)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert attrs(spans.one())[c.RETRIES] == 1


def test_async_retry_counts(spans):
    script = Script(status_response(503, RETRY_NOW), status_response(429, RETRY_NOW), json_response(chat_completion()))
    client = ml.instrument(async_openai_client(script, max_retries=3))
    asyncio.run(client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES))
    assert attrs(spans.one())[c.RETRIES] == 2


def test_server_error_propagates_unchanged_and_marks_span(spans):
    script = Script(status_response(500))
    bare = openai_client(Script(status_response(500)))
    client = ml.instrument(openai_client(script))

    with pytest.raises(openai.InternalServerError) as instrumented_error:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    with pytest.raises(openai.InternalServerError) as bare_error:
        bare.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert str(instrumented_error.value) == str(bare_error.value)
    assert instrumented_error.value.status_code == 500
    span = spans.one()
    assert span.status.status_code is StatusCode.ERROR
    span_attrs = attrs(span)
    assert span_attrs[c.ERROR_TYPE] == "InternalServerError"
    assert span_attrs[c.RETRIES] == 0
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in span_attrs
    assert c.COST_USD not in span_attrs


def test_server_error_after_exhausted_retries(spans):
    script = Script(status_response(500, RETRY_NOW))
    client = ml.instrument(openai_client(script, max_retries=2))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(script.requests) == 3
    assert attrs(spans.one())[c.RETRIES] == 2


def test_exception_object_and_traceback_pass_through(spans, monkeypatch):
    client = openai_client(Script(json_response(chat_completion())))
    error = RuntimeError("boom from the SDK")

    def failing_request(*args, **kwargs):
        raise error

    monkeypatch.setattr(client, "request", failing_request)
    ml.instrument(client)
    with pytest.raises(RuntimeError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert caught.value is error
    assert caught.traceback[-1].name == "failing_request"
    assert attrs(spans.one())[c.ERROR_TYPE] == "RuntimeError"


@pytest.mark.parametrize("how", ["close", "with", "break-then-collect", "never-read"])
def test_early_closed_stream_ends_span_without_tokens(spans, how):
    client = ml.instrument(openai_client(Script(chat_stream_handler())))

    def open_stream():
        return client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)

    if how == "close":
        stream = open_stream()
        next(iter(stream))
        assert spans.all() == []
        stream.close()
    elif how == "with":
        with open_stream() as stream:
            for _chunk in stream:
                break
    elif how == "break-then-collect":
        stream = open_stream()
        for _chunk in stream:
            break
        del stream, _chunk
        gc.collect()
    else:
        stream = open_stream()
        del stream
        gc.collect()

    span = spans.one()
    span_attrs = attrs(span)
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in span_attrs  # never guessed
    assert c.GEN_AI_USAGE_OUTPUT_TOKENS not in span_attrs
    assert c.TOOL_CALLS not in span_attrs  # the response was not seen to its end
    assert span.status.status_code is StatusCode.UNSET
    if how != "never-read":
        assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0


def test_responses_api_cached_and_reasoning(spans):
    client = ml.instrument(
        openai_client(Script(json_response(responses_object(function_calls=[("lookup", "call_9")]))))
    )
    response = client.responses.create(model="o4-mini", input="hi")
    assert response.output_text == "Hi there"
    span_attrs = attrs(spans.one())
    assert spans.one().name == "chat o4-mini"
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 200  # includes the 150 cached
    assert span_attrs[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 150
    assert span_attrs[c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 0
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 80  # includes the 64 reasoning
    assert span_attrs[c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 64
    assert span_attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] == ["completed"]
    assert span_attrs[c.TOOL_CALL_NAMES] == ["lookup"]
    assert span_attrs[c.TOOL_CALL_IDS] == ["call_9"]
    assert span_attrs[c.COST_USD] == pytest.approx(
        expected_cost("openai", "o4-mini-2025-04-16", 200, 80, cache_read=150)
    )


def test_responses_api_stream_and_helper(spans):
    final = responses_object()
    client = ml.instrument(openai_client(Script(sse_response(responses_events(final), named=True, done=False))))

    events = [event.type for event in client.responses.create(model="o4-mini", input="hi", stream=True)]
    assert events[-1] == "response.completed"
    with client.responses.stream(model="o4-mini", input="hi") as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        assert stream.get_final_response().usage.input_tokens == 200
    assert text == "Hi there"

    assert len(spans.all()) == 2
    for span in spans.all():
        span_attrs = attrs(span)
        assert span_attrs[c.GEN_AI_REQUEST_STREAM] is True
        assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 200
        assert span_attrs[c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 64
        assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
        assert span_attrs[c.TOOL_CALLS] == 0


def test_with_raw_response_and_streaming_response(spans):
    client = ml.instrument(openai_client(Script(json_response(chat_completion(prompt_tokens=11, completion_tokens=4)))))

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES)
    assert raw.headers["content-type"] == "application/json"
    assert raw.parse().usage.prompt_tokens == 11
    with client.chat.completions.with_streaming_response.create(model="gpt-4o-mini", messages=MESSAGES) as response:
        assert response.parse().usage.completion_tokens == 4

    assert [attrs(span)[c.GEN_AI_USAGE_INPUT_TOKENS] for span in spans.all()] == [11, 11]


def test_raw_response_stream_is_observed(spans):
    client = ml.instrument(openai_client(Script(chat_stream_handler())))
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert [chunk.choices[0].delta.content for chunk in raw.parse()] == ["", "Hel", "lo", None]
    assert attrs(spans.one())[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 2


def test_embeddings_have_input_tokens_and_cost(spans):
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    }
    client = ml.instrument(openai_client(Script(json_response(body))))
    client.embeddings.create(model="text-embedding-3-small", input="hello")
    span = spans.one()
    assert span.name == "embeddings text-embedding-3-small"
    span_attrs = attrs(span)
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 8
    assert c.GEN_AI_USAGE_OUTPUT_TOKENS not in span_attrs
    assert span_attrs[c.COST_USD] == pytest.approx(expected_cost("openai", "text-embedding-3-small", 8, 0))


def test_unknown_model_has_tokens_but_no_cost_and_warns_once(spans, caplog):
    body = chat_completion(model="acme-private-model-7")
    client = ml.instrument(openai_client(Script(json_response(body))))
    with caplog.at_level("WARNING"):
        client.chat.completions.create(model="acme-private-model-7", messages=MESSAGES)
        client.chat.completions.create(model="acme-private-model-7", messages=MESSAGES)
    for span in spans.all():
        span_attrs = attrs(span)
        assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 100
        assert c.COST_USD not in span_attrs  # never 0
    warnings = [record for record in caplog.records if "acme-private-model-7" in record.getMessage()]
    assert len(warnings) == 1


def test_other_endpoints_are_not_observed(spans):
    body = {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "created": 1, "owned_by": "openai"}]}
    client = ml.instrument(openai_client(Script(json_response(body))))
    assert [model.id for model in client.models.list()] == ["gpt-4o"]
    assert spans.all() == []


def test_copies_are_instrumented_and_uninstrument_restores(spans):
    script = Script(json_response(chat_completion()))
    client = ml.instrument(openai_client(script), target="t/copy")
    http_client = client._client

    copied = client.with_options(timeout=5)
    copied.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert attrs(spans.one())[c.TARGET_ID] == "t/copy"

    ml.uninstrument(copied)
    ml.uninstrument(client)
    assert "request" not in client.__dict__
    assert "_sleep_for_retry" not in client.__dict__
    assert http_client.event_hooks["request"] == []
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(spans.all()) == 1


def test_instrument_twice_replaces_settings(spans):
    script = Script(status_response(429, RETRY_NOW), json_response(chat_completion()))
    client = openai_client(script, max_retries=2)
    ml.instrument(client, target="first")
    ml.instrument(client, target="second", role="orchestration")
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(script.requests) == 2
    span_attrs = attrs(spans.one())
    assert span_attrs[c.TARGET_ID] == "second"
    assert span_attrs[c.ROLE] == "orchestration"
    assert span_attrs[c.RETRIES] == 1  # the retry hook is installed once, not once per instrument()
    assert client._client.event_hooks["request"] == []  # retries are counted without an HTTP hook


def test_instrument_rejects_other_objects():
    with pytest.raises(TypeError):
        ml.instrument(object())


def test_weird_response_shape_is_swallowed_and_logged_once(spans, caplog):
    weird = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": {"prompt_tokens": "lots"},
    }
    client = ml.instrument(openai_client(Script(json_response(weird))))
    with caplog.at_level("WARNING"):
        for _ in range(2):
            result = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
            assert result.id == "x"
    assert len(spans.all()) == 2
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in attrs(spans.all()[0])


def test_request_body_sent_unchanged_for_non_stream(spans):
    script = Script(json_response(chat_completion()))
    client = ml.instrument(openai_client(script))
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, temperature=0.2)
    bare_script = Script(json_response(chat_completion()))
    openai_client(bare_script).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, temperature=0.2)
    assert script.bodies() == bare_script.bodies()
    headers = dict(script.requests[0].headers)
    assert json.loads(script.requests[0].content)["model"] == "gpt-4o-mini"
    assert "x-stainless-retry-count" in headers


def test_mock_transport_type_is_httpx2():
    # openai 3.x builds on httpx2; this suite drives it with httpx2.MockTransport (and one classic-httpx test).
    client = openai_client(Script(json_response(chat_completion())))
    assert isinstance(client._client, httpx2.Client)


def test_structured_parse_helper(spans):
    import pydantic

    class Greeting(pydantic.BaseModel):
        text: str

    body = chat_completion()
    body["choices"][0]["message"]["content"] = '{"text": "hi"}'
    client = ml.instrument(openai_client(Script(json_response(body))))
    parsed = client.chat.completions.parse(model="gpt-4o-mini", messages=MESSAGES, response_format=Greeting)
    assert parsed.choices[0].message.parsed == Greeting(text="hi")
    assert attrs(spans.one())[c.GEN_AI_USAGE_INPUT_TOKENS] == 100


def test_async_raw_response_stream(spans):
    client = ml.instrument(async_openai_client(Script(chat_stream_handler())))

    async def main():
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True
        )
        return [chunk.choices[0].delta.content async for chunk in raw.parse()]

    assert asyncio.run(main()) == ["", "Hel", "lo", None]
    assert attrs(spans.one())[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 2


def test_async_streaming_response_context(spans):
    client = ml.instrument(async_openai_client(Script(chat_stream_handler())))

    async def main():
        async with client.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True
        ) as response:
            stream = await response.parse()
            return [chunk.choices[0].delta.content async for chunk in stream]

    assert asyncio.run(main()) == ["", "Hel", "lo", None]
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 10
    assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
