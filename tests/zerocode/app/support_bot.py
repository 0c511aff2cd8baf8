"""A support bot with no meritlens code: the application the zero-code tests run under
`opentelemetry-instrument`. Its LLM providers are the official SDKs on a mock transport (fake_llm).

`main(wrap, prepare)` lets decorated_bot.py run the very same calls decorated by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai

import fake_llm

QUESTION = [{"role": "user", "content": "Where is my order?"}]
CALLS = 8
"""LLM calls (each its own trace, so one sample each) made by main()."""


def answer(client: openai.OpenAI) -> str:
    return client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION).choices[0].message.content


def stream_answer(client: openai.OpenAI) -> str:
    # No stream_options: the chunks are exactly those the SDK gives without any instrumentation.
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream)


def raw_answer(client: openai.OpenAI) -> str:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=QUESTION)
    return raw.parse().choices[0].message.content


def plan_tools(client: openai.OpenAI) -> list[str]:
    message = client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION).choices[0].message
    return [call.function.name for call in message.tool_calls or ()]


async def async_answer(client: openai.AsyncOpenAI) -> str:
    response = await client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION)
    return response.choices[0].message.content


def claude_answer(client: anthropic.Anthropic) -> str:
    message = client.messages.create(model="claude-3-5-sonnet-20241022", max_tokens=64, messages=QUESTION)
    return message.content[0].text


def claude_stream(client: anthropic.Anthropic) -> str:
    with client.messages.stream(model="claude-3-5-sonnet-20241022", max_tokens=64, messages=QUESTION) as stream:
        return "".join(stream.text_stream)


async def async_claude_answer(client: anthropic.AsyncAnthropic) -> str:
    message = await client.messages.create(model="claude-3-5-sonnet-20241022", max_tokens=64, messages=QUESTION)
    return message.content[0].text


def main(wrap: Callable[[Any], Any] = lambda f: f, prepare: Callable[[Any], Any] = lambda client: client) -> None:
    oa = prepare(fake_llm.openai_with_one_retry())
    assert wrap(answer)(oa) == "Hello!"
    assert wrap(stream_answer)(prepare(fake_llm.openai_streaming())) == "Hello"
    assert wrap(raw_answer)(prepare(fake_llm.openai_plain())) == "Hello!"
    assert wrap(plan_tools)(prepare(fake_llm.openai_tool_calls())) == ["lookup_order", "refund"]
    assert asyncio.run(wrap(async_answer)(prepare(fake_llm.async_openai_plain()))) == "Hello!"
    assert wrap(claude_answer)(prepare(fake_llm.anthropic_cached())) == "Bonjour"
    assert wrap(claude_stream)(prepare(fake_llm.anthropic_streaming())) == "Bonjour"
    assert asyncio.run(wrap(async_claude_answer)(prepare(fake_llm.async_anthropic_plain()))) == "Bonjour"


if __name__ == "__main__":
    main()
