"""@observe on functions, coroutines, generators and stream-returning functions."""

from __future__ import annotations

import asyncio
import gc
import inspect

import anthropic
import openai
import pytest
from opentelemetry.trace import SpanKind, StatusCode

import meritlens.instrumentation as ml
from meritlens.instrumentation import conventions as c
from tests.instrumentation.llm_fakes import (
    Script,
    anthropic_client,
    anthropic_events,
    anthropic_message,
    attrs,
    chat_chunks,
    chat_completion,
    chat_stream_handler,
    expected_cost,
    json_response,
    openai_client,
    responses_object,
    sse_response,
)


def test_sync_function_returning_sdk_object(spans):
    completion = openai.types.chat.ChatCompletion.model_validate(chat_completion(cached_tokens=60))

    @ml.observe(target="support-bot/answer")
    def answer(question, model="gpt-4o-mini"):
        return completion

    assert answer("hi", model="gpt-4o-mini") is completion
    span = spans.one()
    assert span.name == "chat gpt-4o-mini"
    assert span.kind is SpanKind.CLIENT
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
        c.GEN_AI_USAGE_INPUT_TOKENS: 100,
        c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 60,
        c.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
        c.COST_USD: pytest.approx(expected_cost("openai", "gpt-4o-mini-2024-07-18", 100, 20, cache_read=60)),
    }


def test_span_named_after_response_model_when_no_model_argument(spans):
    @ml.observe
    def answer():
        return anthropic_message(model="claude-3-5-haiku-20241022")

    answer()
    span = spans.one()
    assert span.name == "chat claude-3-5-haiku-20241022"
    assert attrs(span)[c.GEN_AI_PROVIDER_NAME] == "anthropic"


@pytest.mark.parametrize(
    ("body", "provider", "expected"),
    [
        (chat_completion(prompt_tokens=100, completion_tokens=20, cached_tokens=40), "openai", (100, 20, 40, None)),
        (responses_object(input_tokens=200, cached_tokens=150, output_tokens=80), "openai", (200, 80, 150, 0)),
        (
            anthropic_message(input_tokens=50, output_tokens=30, cache_read=1000, cache_creation=200),
            "anthropic",
            (1250, 30, 1000, 200),
        ),
    ],
    ids=["openai-chat", "openai-responses", "anthropic"],
)
def test_plain_dict_returns(spans, body, provider, expected):
    @ml.observe(target="t")
    def call():
        return body

    assert call() is body
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_PROVIDER_NAME] == provider
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == expected[0]
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == expected[1]
    assert span_attrs[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == expected[2]
    assert span_attrs.get(c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS) == expected[3]
    assert span_attrs[c.COST_USD] > 0


def test_async_function(spans):
    @ml.observe(target="t/async", role="orchestration")
    async def judge():
        await asyncio.sleep(0)
        return anthropic.types.Message.model_validate(anthropic_message())

    message = asyncio.run(judge())
    assert isinstance(message, anthropic.types.Message)
    span_attrs = attrs(spans.one())
    assert span_attrs[c.ROLE] == "orchestration"
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 50


def test_generator_function_of_dict_chunks(spans):
    @ml.observe(target="t/gen")
    def stream_answer(model):
        received = yield from chat_chunks(usage=(12, 3), cached_tokens=4)[:2]
        assert received is None
        yield from chat_chunks(usage=(12, 3), cached_tokens=4)[2:]
        return "done"

    assert inspect.isgeneratorfunction(stream_answer)
    generator = stream_answer(model="gpt-4o-mini")
    assert spans.all() == []  # nothing runs before iteration
    items = []
    with pytest.raises(StopIteration) as stop:
        while True:
            items.append(next(generator))
    assert stop.value.value == "done"  # the return value passes through
    assert len(items) == len(chat_chunks(usage=(12, 3)))  # a generator's own usage chunk is not withheld
    span = spans.one()
    span_attrs = attrs(span)
    assert span.name == "chat gpt-4o-mini"
    assert span_attrs[c.GEN_AI_PROVIDER_NAME] == "openai"
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 12
    assert span_attrs[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 4
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] >= 0
    assert span_attrs[c.GEN_AI_REQUEST_STREAM] is True


def test_generator_send_and_throw_are_forwarded(spans):
    @ml.observe
    def echo():
        received = []
        try:
            while True:
                received.append((yield {"object": "chat.completion.chunk", "model": "m", "choices": []}))
        except KeyError:
            yield {"received": received}

    generator = echo()
    next(generator)
    generator.send("a")
    generator.send("b")
    assert generator.throw(KeyError("stop")) == {"received": ["a", "b"]}
    generator.close()
    assert len(spans.all()) == 1


def test_async_generator_function_of_anthropic_events(spans):
    @ml.observe(target="t/agen")
    async def stream_events():
        for event in anthropic_events(input_tokens=5, output_tokens=9, cache_read=7):
            yield event

    async def consume():
        return [event["type"] async for event in stream_events()]

    assert inspect.isasyncgenfunction(stream_events)
    kinds = asyncio.run(consume())
    assert kinds[-1] == "message_stop"
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 12
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 9


def test_function_returning_an_sdk_stream_from_a_plain_client(spans):
    client = openai_client(Script(chat_stream_handler()))

    @ml.observe(target="t/stream")
    def ask():
        return client.chat.completions.create(
            model="gpt-4o-mini", messages=[], stream=True, stream_options={"include_usage": True}
        )

    stream = ask()
    assert isinstance(stream, openai.Stream)
    assert spans.all() == []
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 2
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_INPUT_TOKENS] == 10
    assert span_attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0


def test_function_returning_an_anthropic_helper_stream(spans):
    client = anthropic_client(Script(sse_response(anthropic_events(), named=True, done=False)))

    @ml.observe
    def ask():
        manager = client.messages.stream(model="claude-3-5-sonnet-20241022", max_tokens=10, messages=[])
        return manager.__enter__()

    stream = ask()
    assert "".join(stream.text_stream) == "Bonjour"
    assert stream.get_final_message().usage.output_tokens == 30
    assert attrs(spans.one())[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 30


class _ChunkIterator:
    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self.label = "custom"
        self.closed = False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._chunks)

    def close(self):
        self.closed = True


def test_function_returning_a_custom_iterator_gets_a_forwarding_proxy(spans):
    inners = []

    @ml.observe
    def ask():
        inners.append(_ChunkIterator(chat_chunks(usage=(3, 1))))
        return inners[-1]

    proxy = ask()
    assert proxy.label == "custom"  # attribute access is forwarded
    assert len(list(proxy)) == len(chat_chunks(usage=(3, 1)))
    assert attrs(spans.one())[c.GEN_AI_USAGE_INPUT_TOKENS] == 3

    early = ask()
    next(early)
    early.close()
    assert inners[-1].closed is True
    assert len(spans.all()) == 2


def test_early_break_from_returned_generator_ends_span(spans):
    @ml.observe
    def ask():
        return (chunk for chunk in chat_chunks(usage=(3, 1)))

    for _chunk in ask():
        break
    gc.collect()
    span_attrs = attrs(spans.one())
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in span_attrs


def test_exceptions_propagate_unchanged(spans):
    error = ValueError("the model is tired")

    @ml.observe(target="t")
    def fail():
        raise error

    with pytest.raises(ValueError) as caught:
        fail()
    assert caught.value is error
    assert caught.traceback[-1].name == "fail"
    span = spans.one()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[c.ERROR_TYPE] == "ValueError"
    assert span.events[0].name == "exception"


def test_exception_inside_generator_propagates(spans):
    error = ConnectionResetError("stream broke")

    @ml.observe
    def broken():
        yield chat_chunks()[0]
        raise error

    generator = broken()
    next(generator)
    with pytest.raises(ConnectionResetError) as caught:
        next(generator)
    assert caught.value is error
    assert attrs(spans.one())[c.ERROR_TYPE] == "ConnectionResetError"


def test_weird_shapes_never_break_the_app(spans, caplog):
    weird = {"object": "chat.completion", "model": "gpt-4o-mini", "choices": 5, "usage": {"prompt_tokens": [1]}}

    @ml.observe
    def odd():
        return weird

    with caplog.at_level("WARNING"):
        assert odd() is weird
        assert odd() is weird
    assert len(spans.all()) == 2
    assert len([record for record in caplog.records if "meritlens" in record.getMessage()]) == 1


def test_unrecognized_return_records_span_without_usage(spans):
    @ml.observe(target="t", provider="acme")
    def ask():
        return "plain text answer"

    assert ask() == "plain text answer"
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_PROVIDER_NAME] == "acme"
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in span_attrs
    assert c.GEN_AI_REQUEST_STREAM not in span_attrs  # neither a response nor a stream


def test_observe_around_instrumented_call_counts_tokens_once(spans):
    client = ml.instrument(openai_client(Script(json_response(chat_completion()))))

    @ml.observe(target="t/outer")
    def answer():
        return client.chat.completions.create(model="gpt-4o-mini", messages=[])

    answer()
    inner, outer = spans.all()
    assert inner.parent.span_id == outer.context.span_id
    assert attrs(inner)[c.TARGET_ID] == "t/outer"  # inherited from the observed function
    assert attrs(inner)[c.GEN_AI_USAGE_INPUT_TOKENS] == 100
    for key in (c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_OUTPUT_TOKENS, c.COST_USD):
        assert key not in attrs(outer)


def test_invalid_role_is_refused():
    with pytest.raises(ValueError):
        ml.observe(role="judge")


def test_async_function_returning_an_async_sdk_stream(spans):
    from tests.instrumentation.llm_fakes import async_openai_client

    client = async_openai_client(Script(chat_stream_handler()))

    @ml.observe(target="t/astream")
    async def ask():
        return await client.chat.completions.create(
            model="gpt-4o-mini", messages=[], stream=True, stream_options={"include_usage": True}
        )

    async def main():
        stream = await ask()
        assert isinstance(stream, openai.AsyncStream)
        return [chunk async for chunk in stream]

    assert len(asyncio.run(main())) == 5
    span_attrs = attrs(spans.one())
    assert span_attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert span_attrs[c.GEN_AI_REQUEST_STREAM] is True


@pytest.mark.parametrize("shape, provider, tokens", [
    ({"model": "gpt-4o-mini-2024-07-18", "usage": {"prompt_tokens": 300, "completion_tokens": 40},
      "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}]},
     "openai", (300, 40)),
    ({"model": "claude-3-5-haiku-20241022", "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
      "usage": {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 200}},
     "anthropic", (230, 12)),
])
def test_hand_made_dicts_without_an_object_tag_are_read_by_their_fields(spans, shape, provider, tokens):
    @ml.observe(target="t")
    def answer():
        return shape

    assert answer() is shape
    got = attrs(spans.one())
    assert (got[c.GEN_AI_USAGE_INPUT_TOKENS], got[c.GEN_AI_USAGE_OUTPUT_TOKENS]) == tokens
    assert got[c.GEN_AI_PROVIDER_NAME] == provider and got[c.COST_USD] > 0


def test_a_dict_that_is_no_llm_response_records_no_tokens(spans):
    @ml.observe(target="t")
    def answer():
        return {"usage": {"prompt_tokens": 3}, "note": "no choices"}

    answer()
    assert c.GEN_AI_USAGE_INPUT_TOKENS not in attrs(spans.one())
