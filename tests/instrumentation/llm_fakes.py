"""Fake OpenAI and Anthropic HTTP APIs for driving the real SDKs through httpx MockTransport (no network)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import anthropic
import httpx2
import openai

Handler = Callable[[httpx2.Request], httpx2.Response]


class Script:
    """Answers requests with a scripted list of responses (the last one repeats) and records each request."""

    def __init__(self, *responses: httpx2.Response | Callable[[httpx2.Request], httpx2.Response]) -> None:
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        index = min(len(self.requests), len(self.responses)) - 1
        response = self.responses[index]
        return response(request) if callable(response) else _fresh(response)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests if request.content]


def _fresh(response: httpx2.Response) -> httpx2.Response:
    # A Response's body can be read once: hand out a copy each time.
    return httpx2.Response(response.status_code, headers=response.headers, content=response.content)


def json_response(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, json=body, headers=headers or {})


def sse_response(events: Iterable[dict[str, Any]], *, named: bool = False, done: bool = True) -> httpx2.Response:
    """A text/event-stream body; ``named`` adds the ``event:`` line (Anthropic and Responses API style)."""
    lines = []
    for event in events:
        if named:
            lines.append(f"event: {event['type']}\n")
        lines.append(f"data: {json.dumps(event)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return httpx2.Response(200, content="".join(lines).encode(), headers={"content-type": "text/event-stream"})


def status_response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, json={"error": {"message": f"fake {status}", "type": "fake"}}, headers=headers or {})


# --- OpenAI shapes -------------------------------------------------------------------------------------------------


def chat_completion(
    *,
    model: str = "gpt-4o-mini-2024-07-18",
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
    cached_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    tool_calls: list[tuple[str, str]] | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls else "Hello!"}
    if tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for name, call_id in tool_calls
        ]
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage,
    }


def chat_chunks(
    *,
    model: str = "gpt-4o-mini-2024-07-18",
    texts: tuple[str, ...] = ("Hel", "lo"),
    usage: tuple[int, int] | None = (10, 2),
    cached_tokens: int | None = None,
    tool_calls: list[tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Chat completion chunks; ``usage`` (prompt, completion) adds the final usage-only chunk."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": text}) for text in texts]
    for index, (name, call_id) in enumerate(tool_calls or ()):
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]
                }
            )
        )
        chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": "{}"}}]}))
    chunks.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    if usage is not None:
        usage_body: dict[str, Any] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
        if cached_tokens is not None:
            usage_body["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
        chunks.append(
            {
                "id": "chatcmpl-s",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [],
                "usage": usage_body,
            }
        )
    return chunks


def chat_stream_handler(*, tool_calls: list[tuple[str, str]] | None = None) -> Handler:
    """Streams chat chunks, with the usage chunk only when the request asked for it (as the real API does)."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        return sse_response(chat_chunks(usage=(10, 2) if include else None, tool_calls=tool_calls))

    return handle


def responses_object(
    *,
    model: str = "o4-mini-2025-04-16",
    input_tokens: int = 200,
    cached_tokens: int = 150,
    output_tokens: int = 80,
    reasoning_tokens: int = 64,
    function_calls: list[tuple[str, str]] | None = None,
    status: str = "completed",
) -> dict[str, Any]:
    output: list[dict[str, Any]] = [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hi there", "annotations": []}],
        }
    ]
    for name, call_id in function_calls or ():
        output.append(
            {
                "id": f"fc_{call_id}",
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": "{}",
                "status": "completed",
            }
        )
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "model": model,
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def responses_events(final: dict[str, Any]) -> list[dict[str, Any]]:
    created = {**final, "status": "in_progress", "output": [], "usage": None}
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    done_part = {**part, "text": "Hi there"}
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    events = [
        {"type": "response.created", "response": created},
        {"type": "response.in_progress", "response": created},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **where, "part": part},
        {"type": "response.output_text.delta", **where, "delta": "Hi there", "logprobs": []},
        {"type": "response.output_text.done", **where, "text": "Hi there", "logprobs": []},
        {"type": "response.content_part.done", **where, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": final["output"][0]},
        {"type": "response.completed", "response": final},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


# --- Anthropic shapes ----------------------------------------------------------------------------------------------


def anthropic_message(
    *,
    model: str = "claude-3-5-sonnet-20241022",
    input_tokens: int = 50,
    output_tokens: int = 30,
    cache_read: int | None = None,
    cache_creation: int | None = None,
    tool_uses: list[tuple[str, str]] | None = None,
    stop_reason: str = "end_turn",
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "Bonjour"}]
    for name, tool_id in tool_uses or ():
        content.append({"type": "tool_use", "id": tool_id, "name": name, "input": {}})
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    if cache_creation is not None:
        usage["cache_creation_input_tokens"] = cache_creation
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if tool_uses else stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def anthropic_events(
    *,
    model: str = "claude-3-5-sonnet-20241022",
    input_tokens: int = 50,
    output_tokens: int = 30,
    cache_read: int | None = None,
    cache_creation: int | None = None,
    tool_uses: list[tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    start_usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    if cache_read is not None:
        start_usage["cache_read_input_tokens"] = cache_read
    if cache_creation is not None:
        start_usage["cache_creation_input_tokens"] = cache_creation
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_02",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Bon"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "jour"}},
        {"type": "content_block_stop", "index": 0},
    ]
    for offset, (name, tool_id) in enumerate(tool_uses or (), start=1):
        events += [
            {
                "type": "content_block_start",
                "index": offset,
                "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": offset,
                "delta": {"type": "input_json_delta", "partial_json": "{}"},
            },
            {"type": "content_block_stop", "index": offset},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if tool_uses else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]
    return events


# --- clients ---------------------------------------------------------------------------------------------------


def openai_client(handler: Handler, *, max_retries: int = 0, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://fake-openai.test/v1",
        max_retries=max_retries,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        **kwargs,
    )


def async_openai_client(handler: Handler, *, max_retries: int = 0, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="http://fake-openai.test/v1",
        max_retries=max_retries,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
        **kwargs,
    )


def anthropic_client(handler: Handler, *, max_retries: int = 0, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-test",
        base_url="http://fake-anthropic.test",
        max_retries=max_retries,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        **kwargs,
    )


def async_anthropic_client(handler: Handler, *, max_retries: int = 0, **kwargs: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="http://fake-anthropic.test",
        max_retries=max_retries,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
        **kwargs,
    )


RETRY_NOW = {"retry-after-ms": "1"}
"""Headers of a 429/5xx that make the SDKs retry after one millisecond."""


def attrs(span: Any) -> dict[str, Any]:
    """A span's attributes as a plain dict, sequences as lists."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in (span.attributes or {}).items()}


def expected_cost(
    provider: str, model: str, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0
) -> float:
    """The price genai-prices itself computes (slow path), to check meritlens' figure independently."""
    from genai_prices import Usage, calc_price

    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    return float(calc_price(usage, model, provider_id=provider).total_price)
