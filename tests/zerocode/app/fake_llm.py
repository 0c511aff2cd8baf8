"""The support bot's providers: official SDK clients on httpx2.MockTransport with scripted answers
(tests/instrumentation/llm_fakes.py), so the bot runs offline. Imports nothing from meritlens."""

from __future__ import annotations

import anthropic
import openai

from llm_fakes import (
    RETRY_NOW,
    Script,
    anthropic_client,
    anthropic_events,
    anthropic_message,
    async_anthropic_client,
    async_openai_client,
    chat_completion,
    chat_stream_handler,
    json_response,
    openai_client,
    sse_response,
    status_response,
)


def openai_with_one_retry() -> openai.OpenAI:
    """A 429, then an answer with 40 of its 100 input tokens cached."""
    return openai_client(Script(status_response(429, RETRY_NOW), json_response(chat_completion(cached_tokens=40))),
                         max_retries=2)


def openai_streaming() -> openai.OpenAI:
    return openai_client(Script(chat_stream_handler()))


def openai_plain() -> openai.OpenAI:
    return openai_client(Script(json_response(chat_completion())))


def openai_tool_calls() -> openai.OpenAI:
    completion = chat_completion(tool_calls=[("lookup_order", "call_1"), ("refund", "call_2")],
                                 finish_reason="tool_calls")
    return openai_client(Script(json_response(completion)))


def async_openai_plain() -> openai.AsyncOpenAI:
    return async_openai_client(Script(json_response(chat_completion(prompt_tokens=60, completion_tokens=15))))


def anthropic_cached() -> anthropic.Anthropic:
    return anthropic_client(Script(json_response(anthropic_message(cache_read=1000, cache_creation=200))))


def anthropic_streaming() -> anthropic.Anthropic:
    return anthropic_client(Script(sse_response(anthropic_events(), named=True, done=False)))


def async_anthropic_plain() -> anthropic.AsyncAnthropic:
    return async_anthropic_client(Script(json_response(anthropic_message())))
